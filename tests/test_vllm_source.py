"""vLLM's pinned source release (platform_config/pins.py VLLM_SOURCE: PyPI's vllm-0.18.0.tar.gz,
downloaded by `make upstream-sources` and read through tests/helpers.py vllm_source)."""

from __future__ import annotations

import hashlib

import pytest

from platform_config.pins import VLLM, VLLM_SOURCE, VLLM_VERSION, SourceReleasePin

from .helpers import vllm_source
from .upstream_sources import fetch, release_path

# --- the pin and its download ---------------------------------------------------------------


@pytest.mark.upstream_source
def test_the_source_release_is_the_pinned_vllm_version():
    assert VLLM_SOURCE.filename == f"vllm-{VLLM_VERSION}.tar.gz" and VLLM.tag == f"v{VLLM_VERSION}"
    assert f"\nVersion: {VLLM_VERSION}\n" in vllm_source("PKG-INFO")


def test_a_source_release_is_kept_only_with_its_pinned_hash(tmp_path):
    served = tmp_path / "served" / "pkg-1.0.tar.gz"
    served.parent.mkdir()
    served.write_bytes(b"release")
    good = SourceReleasePin(served.as_uri(), hashlib.sha256(b"release").hexdigest())
    cache = tmp_path / "cache"
    assert fetch(good, cache) is None and release_path(good, cache).read_bytes() == b"release"
    # A file that is not the pinned one is downloaded again.
    release_path(good, cache).write_bytes(b"tampered")
    assert fetch(good, cache) is None and release_path(good, cache).read_bytes() == b"release"

    other = tmp_path / "other"
    wrong = SourceReleasePin(served.as_uri(), "0" * 64)
    assert f"sha256 {good.sha256}, not the pinned {'0' * 64}" in str(fetch(wrong, other))
    missing = SourceReleasePin((tmp_path / "served" / "gone-1.0.tar.gz").as_uri(), good.sha256)
    assert str(fetch(missing, other)).startswith(f"could not download {missing.url}")
    assert not other.exists() or not any(other.iterdir())
