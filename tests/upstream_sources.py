"""`python -m tests.upstream_sources` (`make upstream-sources`): download each pinned upstream source
release the tests read (platform_config/pins.py SOURCE_RELEASES) into build/upstream-sources/ when
it is missing, and check every one against its pinned sha256. Exits 1 naming the URL when a
download fails or a hash does not match (a bad download is deleted, never kept).
"""

from __future__ import annotations

import hashlib
import sys
import urllib.error
import urllib.request
from pathlib import Path

from platform_config.pins import SOURCE_RELEASES, SourceReleasePin
from preview.vllm_release import SOURCES_DIR, release_path

TIMEOUT_SECONDS = 120


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(pin: SourceReleasePin, directory: Path = SOURCES_DIR) -> str | None:
    """Make sure the release is in `directory` with its pinned hash; None, or what went wrong."""
    path = release_path(pin, directory)
    if path.exists():
        found = sha256_of(path)
        if found == pin.sha256:
            return None
        path.unlink()
        print(f"{path}: sha256 {found}, not the pinned {pin.sha256}; downloading it again", file=sys.stderr)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".part")
    print(f"downloading {pin.url}", file=sys.stderr)
    try:
        with urllib.request.urlopen(pin.url, timeout=TIMEOUT_SECONDS) as response, partial.open("wb") as out:
            while block := response.read(1 << 20):
                out.write(block)
    except (urllib.error.URLError, OSError) as error:
        partial.unlink(missing_ok=True)
        return f"could not download {pin.url}: {error}"
    found = sha256_of(partial)
    if found != pin.sha256:
        partial.unlink()
        return f"{pin.url}: sha256 {found}, not the pinned {pin.sha256} (platform_config/pins.py)"
    partial.replace(path)
    return None


def main() -> int:
    problems = [problem for pin in SOURCE_RELEASES if (problem := fetch(pin)) is not None]
    for problem in problems:
        print(f"upstream-sources: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
