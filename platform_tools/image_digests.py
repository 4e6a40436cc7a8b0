"""What each image reference points to now, asked of its registry over the OCI distribution API, and the image lock
(`images.lockFile`) written from the answers: `python -m platform_tools lock-images <stack>`.

The API, as the registries serve it (distribution/distribution v2.8.2 `docs/spec/api.md`, the OCI distribution spec
v1.1.0 `spec.md`): `HEAD /v2/<name>/manifests/<tag>` with the manifest types accepted answers the digest of the
manifest (or the multi-platform index) in `Docker-Content-Digest`; a registry that wants a token answers 401 with a
`WWW-Authenticate: Bearer realm=...,service=...,scope=...` challenge, whose realm hands an anonymous pull token for a
public repository (Docker Hub, ghcr.io, public.ecr.aws; the answer's `token`, or `access_token`). The digest is
computed from the manifest's own bytes, which `Docker-Content-Digest`, where sent, must equal ("should not be trusted
over the local digest", api.md). A reference is read as `docker` reads it (distribution/reference v0.6.0
`normalize.go` `splitDockerDomain`): a first part that is `localhost`, holds a `.` or `:`, or is not lower case names
the registry (`index.docker.io` is Docker Hub's old name); else it is Docker Hub's, and a one-part name is under
`library/`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from platform_config.image_lock import LOCK_VERSION, stack_images
from platform_config.models import LOCK_FILE_PATTERN, PlatformConfig
from platform_config.models.base import IMAGE_DIGEST_PATTERN, image_tag

ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)
DOCKER_HUB = "docker.io"
# Docker Hub's API host: `docker.io` names the registry, this host serves it (distribution/reference `normalize.go`).
DOCKER_HUB_API = "registry-1.docker.io"
# A manifest or token answer larger than this is not one (a manifest list of every platform is a few KiB).
MAX_ANSWER_BYTES = 4 << 20
_DIGEST = re.compile(f"^{IMAGE_DIGEST_PATTERN}$")
_LOOPBACK = re.compile(r"(127\.0\.0\.1|localhost|\[::1\])(:\d{1,5})?")
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')
# A registry host, with its port: what --mirror names.
_HOST = re.compile(r"[A-Za-z0-9.-]{1,253}(:\d{1,5})?")


class ImageLockError(Exception):
    """A bad flag, or a registry that cannot be asked or answers no digest: exit 2, the message naming the flag, or
    the image and the URL."""


@dataclass(frozen=True)
class ImageName:
    registry: str
    repository: str
    tag: str


def parse_reference(reference: str) -> ImageName:
    """`[registry/]repository:tag` as docker reads it; a reference without a tag, or with a digest, is not asked."""
    if "@" in reference:
        raise ImageLockError(f"{reference}: names its digest already; nothing to ask")
    name, _, tag = reference.rpartition(":")
    if not name or "/" in tag:
        raise ImageLockError(f"{reference}: has no tag to resolve")
    first, _, rest = name.partition("/")
    if rest and first == "index.docker.io":  # the legacy "Docker Index" name of Docker Hub
        registry, repository = DOCKER_HUB, rest
    elif rest and ("." in first or ":" in first or first == "localhost" or first.lower() != first):
        registry, repository = first, rest
    else:
        registry, repository = DOCKER_HUB, name
    if registry == DOCKER_HUB and "/" not in repository:
        repository = f"library/{repository}"
    return ImageName(registry, repository, tag)


def check_plain_http(hosts: Iterable[str]) -> set[str]:
    """Hosts asked over plain HTTP: loopback only (a registry on this machine, e.g. a test's), never the network."""
    hosts = set(hosts)
    bad = sorted(h for h in hosts if not _LOOPBACK.fullmatch(h))
    if bad:
        raise ImageLockError(
            f"--plain-http {bad[0]}: only a loopback host (127.0.0.1:<port>, localhost:<port>) may be asked over HTTP"
        )
    return hosts


@dataclass(frozen=True)
class RegistryClient:
    """Asks registries for digests: `mirrors` maps a registry to the host asked in its place (a pull-through mirror
    serves the same content, and a digest names content, not a host); `plain_http` the loopback hosts asked over
    HTTP."""

    mirrors: Mapping[str, str]
    plain_http: frozenset[str] = frozenset()
    timeout_seconds: float = 20.0

    def _base(self, registry: str) -> str:
        host = self.mirrors.get(registry) or (DOCKER_HUB_API if registry == DOCKER_HUB else registry)
        return f"{'http' if host in self.plain_http else 'https'}://{host}"

    def _open(self, request: urllib.request.Request) -> tuple[int, Mapping[str, str], bytes]:
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_seconds) as response:
                return response.status, dict(response.headers.items()), response.read(MAX_ANSWER_BYTES + 1)
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers.items()), error.read(MAX_ANSWER_BYTES + 1)

    def _token(self, challenge: str, image: ImageName, url: str) -> str:
        """An anonymous pull token from the challenge's realm (the distribution token spec, `docs/spec/auth/token.md`)."""
        if not challenge.lower().startswith("bearer "):
            raise ImageLockError(
                f"{url}: asks for {challenge.split(' ', 1)[0] or 'an unknown'} authentication, not a bearer token"
            )
        fields = dict(_CHALLENGE.findall(challenge))
        realm = fields.get("realm", "")
        if not realm.startswith("https://") and not any(realm.startswith(f"http://{h}/") for h in self.plain_http):
            raise ImageLockError(f"{url}: the token realm {realm!r} is not an https URL")
        query = {"scope": fields.get("scope") or f"repository:{image.repository}:pull"}
        if "service" in fields:
            query["service"] = fields["service"]
        status, _, body = self._open(urllib.request.Request(f"{realm}?{urllib.parse.urlencode(query)}"))
        try:
            answer = json.loads(body[:MAX_ANSWER_BYTES]) if status == 200 else None
        except ValueError:
            answer = None
        token = (answer.get("token") or answer.get("access_token")) if isinstance(answer, dict) else None
        if not isinstance(token, str) or not token:
            raise ImageLockError(f"{url}: the token realm {realm} answered {status} without a pull token")
        return token

    def digest(self, reference: str) -> str:
        """The digest `reference`'s tag points to now (an index's, for a multi-platform image)."""
        image = parse_reference(reference)
        url = f"{self._base(image.registry)}/v2/{image.repository}/manifests/{image.tag}"
        headers = {"Accept": ACCEPT}
        try:
            status, answered, body = self._open(urllib.request.Request(url, headers=headers, method="GET"))
            if status == 401:
                headers["Authorization"] = f"Bearer {self._token(answered.get('WWW-Authenticate', ''), image, url)}"
                status, answered, body = self._open(urllib.request.Request(url, headers=headers, method="GET"))
        except (OSError, ValueError) as error:
            raise ImageLockError(f"{reference}: {url} cannot be asked: {getattr(error, 'reason', error)}") from None
        if status != 200:
            raise ImageLockError(f"{reference}: {url} answered {status}")
        if len(body) > MAX_ANSWER_BYTES:
            raise ImageLockError(f"{reference}: {url} answered more than {MAX_ANSWER_BYTES >> 20} MiB: not a manifest")
        # The digest is the manifest's own bytes' (the spec's content address); the header, where sent, must agree.
        computed = f"sha256:{hashlib.sha256(body).hexdigest()}"
        header = answered.get("Docker-Content-Digest")
        if header is not None and header != computed:
            raise ImageLockError(f"{reference}: {url} says {header} for a manifest whose digest is {computed}")
        if not _DIGEST.fullmatch(computed):
            raise ImageLockError(f"{reference}: {computed} is not a sha256 digest")
        return computed


def lock_document(digests: Mapping[str, str], now: datetime | None = None) -> dict[str, Any]:
    """The lock file's JSON (platform_config/image_lock.py ImageLockDocument reads it back)."""
    resolved_at = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"lockVersion": LOCK_VERSION, "resolvedAt": resolved_at, "images": dict(sorted(digests.items()))}


def _mirrors(entries: Iterable[str]) -> dict[str, str]:
    mirrors = {}
    for entry in entries:
        registry, _, host = entry.partition("=")
        if not _HOST.fullmatch(registry) or not _HOST.fullmatch(host):
            raise ImageLockError(f"--mirror {entry!r}: give REGISTRY=HOST, e.g. docker.io=mirror.example.com:5000")
        mirrors[registry] = host
    return mirrors


def write_image_lock(
    project_root: Path,
    stack: str,
    config: PlatformConfig,
    out: str | None,
    mirrors: Iterable[str],
    plain_http: Iterable[str],
    timeout_seconds: float,
) -> None:
    """Ask for every image the stack renders, then write the lock whole (nothing half-written when a registry
    fails), printing each answer and how to name the file."""
    out = out or f"stacks/Pulumi.{stack}.images.json"
    if not LOCK_FILE_PATTERN.fullmatch(out):
        raise ImageLockError(
            f"--out {out!r}: give a .json file in the stack files' folder, e.g. stacks/Pulumi.{stack}.images.json"
        )
    if not 1 <= timeout_seconds <= 120:
        raise ImageLockError(f"--timeout {timeout_seconds}: give 1 to 120 seconds")
    client = RegistryClient(_mirrors(mirrors), frozenset(check_plain_http(plain_http)), timeout_seconds)
    digests = {}
    for reference, named in stack_images(config):
        # A version's image with its own digest: its tag is resolved, so the preview can hold the two to each other
        # (platform_config/image_lock.py); one with a digest and no tag has nothing to resolve and is refused there.
        tagged = reference.split("@", 1)[0]
        if image_tag(tagged) and tagged not in digests:
            digests[tagged] = client.digest(tagged)
            print(f"{tagged} ({named}): {digests[tagged]}")
    path = project_root / out
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(lock_document(digests), indent=2) + "\n")
    os.replace(partial, path)
    named_here = (
        ""
        if config.images.lock_file == out
        else f": set images.lockFile to it (`pulumi config set --path images.lockFile {out}`)"
    )
    print(f"wrote {out}{named_here}")


def add_lock_images_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], stack_file: argparse.ArgumentParser
) -> None:
    """The `lock-images` subcommand's arguments, beside the code that reads them."""
    lock = commands.add_parser(
        "lock-images",
        parents=[stack_file],
        help="ask each image's registry for its digest and write the stack's image lock",
        description="Every image the stack renders (the pinned ones and each version's own), asked of its registry "
        "(anonymous pull tokens for public repositories), written as the image lock: commit it and set images.lockFile "
        "to it, and every pod pulls <image>@<digest>.",
    )
    lock.add_argument("--out", help="the lock file, relative to the project (default: stacks/Pulumi.<stack>.images.json)")
    lock.add_argument(
        "--mirror",
        action="append",
        default=[],
        metavar="REGISTRY=HOST",
        help="ask HOST in REGISTRY's place (a pull-through mirror, e.g. docker.io=mirror.example.com)",
    )
    lock.add_argument("--plain-http", action="append", default=[], metavar="HOST", help="ask this loopback host over HTTP")
    lock.add_argument("--timeout", type=float, default=20.0, help="seconds per registry request (1 to 120)")
