"""A real container registry on loopback (Debian's `docker-registry`: distribution/distribution 2.8.2, the
registry Docker Hub's and most mirrors' API is), for the tests that ask one for digests. Images are pushed over its
API as `docker push` does (a blob upload, then the manifest, then an index over it); without the binary the
caller's test is skipped (and `REQUIRE_REAL_SERVERS=1` turns that skip into a failure, tests/conftest.py)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from .processes import free_ports, stop

READY_SECONDS = 30.0
BINARY = "docker-registry"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"


def _digest(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


@dataclass
class ImageRegistry:
    host: str  # 127.0.0.1:<port>

    def _request(self, method: str, path_or_url: str, data: bytes | None = None, content_type: str | None = None):
        url = path_or_url if path_or_url.startswith("http") else f"http://{self.host}{path_or_url}"
        request = urllib.request.Request(url, data=data, method=method)
        if content_type is not None:
            request.add_header("Content-Type", content_type)
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.headers, response.read()

    def _blob(self, repository: str, data: bytes) -> str:
        headers, _ = self._request("POST", f"/v2/{repository}/blobs/uploads/")
        location = headers["Location"]
        location = location if location.startswith("http") else f"http://{self.host}{location}"
        digest = _digest(data)
        separator = "&" if "?" in location else "?"
        self._request("PUT", f"{location}{separator}digest={digest}", data, "application/octet-stream")
        return digest

    def _manifest(self, repository: str, reference: str, document: dict, media_type: str) -> bytes:
        body = json.dumps(document, indent=3).encode()
        self._request("PUT", f"/v2/{repository}/manifests/{reference}", body, media_type)
        return body

    def push(self, repository: str, tag: str, platforms: tuple[str, ...] = ("amd64", "arm64")) -> str:
        """A multi-platform image at `tag`: one manifest per platform (a config and one layer each), and the index
        over them under the tag; the index's bytes' digest, which is what the tag points to."""
        entries = []
        for architecture in platforms:
            config = json.dumps({"architecture": architecture, "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}})
            layer = f"{repository}:{tag} for {architecture}".encode()
            manifest = {
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": {"mediaType": OCI_CONFIG, "digest": self._blob(repository, config.encode()), "size": len(config)},
                "layers": [
                    {
                        "mediaType": "application/vnd.oci.image.layer.v1.tar",
                        "digest": self._blob(repository, layer),
                        "size": len(layer),
                    }
                ],
            }
            body = json.dumps(manifest, indent=3).encode()
            digest = _digest(body)
            self._manifest(repository, digest, manifest, OCI_MANIFEST)
            entries.append(
                {
                    "mediaType": OCI_MANIFEST,
                    "digest": digest,
                    "size": len(body),
                    "platform": {"os": "linux", "architecture": architecture},
                }
            )
        index = self._manifest(repository, tag, {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}, OCI_INDEX)
        return _digest(index)


def missing_reason() -> str | None:
    if shutil.which(BINARY) is None:
        return f"{BINARY} is not on PATH (Debian package `docker-registry`; `make real-servers` installs it)"
    return None


@contextmanager
def image_registry(folder: Path) -> Iterator[ImageRegistry]:
    """The registry serving from `folder`, on a free loopback port, plain HTTP and no authentication."""
    reason = missing_reason()
    if reason is not None:
        pytest.skip(reason)
    (port,) = free_ports(1)
    config = folder / "config.yml"
    config.write_text(
        json.dumps(
            {
                "version": 0.1,
                "log": {"level": "warn"},
                "storage": {"filesystem": {"rootdirectory": str(folder / "data")}},
                "http": {"addr": f"127.0.0.1:{port}"},
            }
        )
    )
    log = (folder / "registry.log").open("wb")
    process = subprocess.Popen([BINARY, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    registry = ImageRegistry(f"127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + READY_SECONDS
        while True:
            try:
                registry._request("GET", "/v2/")
                break
            except (urllib.error.URLError, ConnectionError):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{BINARY} did not start: {(folder / 'registry.log').read_text()[-2000:]}") from None
                time.sleep(0.1)
        yield registry
    finally:
        stop(process)
        log.close()
