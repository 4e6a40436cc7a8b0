"""The image lock file (`images.lockFile`): each image reference a stack renders and the digest its registry resolved it
to (`python -m platform_tools lock-images` writes it), read strictly; the images a stack renders, which the lock must
hold; and the reference a pod pulls, `<reference>@<digest>`."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, StringConstraints, ValidationError

from .chart_images import chart_images
from .errors import ConfigError, ConfigIssue
from .models import PlatformConfig
from .models.base import IMAGE_DIGEST_PATTERN, ConfigModel, PinnedImage, image_tag
from .pins import AWS_CLI, ENDPOINT_PICKER, ENVOY_PROXY, VLLM

LOCK_VERSION = 1
# A lock holds a stack's images: the four pins, the charts' and one per version at most; a larger file is not a lock.
MAX_LOCK_BYTES = 1 << 20
MAX_LOCKED_IMAGES = 1024
KEY = ("images", "lockFile")
# The pins every stack's pods may pull (the servers', the aws CLI of every S3 copy, the pickers' two containers).
PINNED = {
    VLLM.image: "the pinned vLLM image",
    AWS_CLI.image: "the pinned aws CLI image",
    ENDPOINT_PICKER.image: "the pinned endpoint picker image",
    ENVOY_PROXY.image: "the pinned picker proxy image",
}
Digest = Annotated[str, StringConstraints(pattern=f"^{IMAGE_DIGEST_PATTERN}$")]


class ImageLockDocument(ConfigModel):
    """The lock file's JSON, as `lock-images` writes it."""

    lock_version: Literal[1]
    """The file's format."""
    resolved_at: Annotated[str, Field(min_length=1, max_length=64)]
    """When the registries were asked (ISO 8601, UTC)."""
    images: Annotated[dict[PinnedImage, Digest], Field(max_length=MAX_LOCKED_IMAGES)]
    """Each image reference (as the stack and the pins write it) and the digest of what it pointed to: the manifest
    list or index for a multi-platform image, which every node's runtime resolves to its own platform's manifest."""


@dataclass(frozen=True)
class ImageLock:
    """What the stack's lock file holds (empty: no lock, images by tag)."""

    file: str | None = None
    digests: Mapping[str, str] = field(default_factory=dict)

    def pinned(self, reference: str) -> str:
        """The reference a pod pulls: with its digest where the lock holds one (the tag stays, for who reads the
        manifest; a runtime pulls by the digest alone); a reference that names its own digest, as it is."""
        digest = self.digests.get(reference)
        return reference if digest is None or "@" in reference else f"{reference}@{digest}"


def stack_images(config: PlatformConfig) -> Iterator[tuple[str, str]]:
    """Each image reference the stack's pods may pull, with what names it (a pin, a chart's image, or a version's
    `image` key), each once."""
    yield from ((reference, named) for reference, named in PINNED.items())
    charts: dict[str, str] = {}
    for image in chart_images(config.cluster.kubernetes_version):
        charts.setdefault(image.reference, f"{image.what}, chart {image.chart.chart} {image.chart.version}")
    yield from charts.items()
    for m_index, model in enumerate(config.models):
        for v_index, version in enumerate(model.versions):
            if version.image is not None and version.image not in PINNED:
                yield version.image, f"models[{m_index}].versions[{v_index}].image"


def _read_bytes(path: Path, named: str) -> bytes:
    try:
        # Not a FIFO or a device, whose read would block or never end.
        if not stat.S_ISREG(path.stat().st_mode):
            raise ConfigError([ConfigIssue(KEY, f"{named} is not a regular file")])
        with path.open("rb") as handle:
            data = handle.read(MAX_LOCK_BYTES + 1)
    except OSError as error:
        raise ConfigError([ConfigIssue(KEY, f"{named} cannot be read: {error.strerror or error}")]) from None
    if len(data) > MAX_LOCK_BYTES:
        raise ConfigError([ConfigIssue(KEY, f"{named} is larger than {MAX_LOCK_BYTES >> 20} MiB: not an image lock")])
    return data


def parse_image_lock(data: bytes, named: str) -> ImageLockDocument:
    """A lock file's content, strictly checked; ConfigError at `images.lockFile` naming the bad entry."""
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise ConfigError([ConfigIssue(KEY, f"{named} is not JSON: {str(error)[:200]}")]) from None
    try:
        return ImageLockDocument.model_validate(document, by_alias=True, by_name=False)
    except ValidationError as error:
        problems = [
            f"{'.'.join(str(part) for part in detail['loc']) or '(top)'}: {detail['msg']}"
            for detail in error.errors(include_url=False)
        ]
        raise ConfigError([ConfigIssue(KEY, f"{named} is not an image lock: " + "; ".join(problems[:5])[:800])]) from None


def read_image_lock(config: PlatformConfig, project_dir: Path) -> ImageLock:
    """The lock `images.lockFile` names, which must hold every image the stack renders; an empty lock without one.
    ConfigError at that key when it cannot be read, is not a lock, or lacks an image."""
    lock_file = config.images.lock_file
    if lock_file is None:
        return ImageLock()
    named = f"the image lock {lock_file}"
    document = parse_image_lock(_read_bytes(project_dir / lock_file, named), named)
    missing = [
        ConfigIssue(
            KEY,
            f"{named} does not hold {reference} ({what}): run `python -m platform_tools lock-images <stack>` "
            "where the registries are reachable and commit what it writes",
        )
        for reference, what in stack_images(config)
        if "@" not in reference and reference not in document.images
    ]
    if missing:
        raise ConfigError(missing)
    disagreeing = list(_own_digests_against_the_lock(config, document, named))
    if disagreeing:
        raise ConfigError(disagreeing)
    return ImageLock(lock_file, dict(document.images))


def _own_digests_against_the_lock(config: PlatformConfig, document: ImageLockDocument, named: str) -> Iterator[ConfigIssue]:
    """A version's `image` that names its own digest: with a lock, the lock must hold its tag with that very digest.
    Else a digest written by hand (an image nobody resolved from the tag a reviewer reads) would bypass the lock."""
    for m_index, model in enumerate(config.models):
        for v_index, version in enumerate(model.versions):
            if version.image is None or "@" not in version.image:
                continue
            tagged, digest = version.image.split("@", 1)
            key = ("models", m_index, "versions", v_index, "image")
            if not image_tag(tagged):
                yield ConfigIssue(
                    key, f"names a digest without a tag, which {named} cannot vouch for: write <image>:<tag>@<digest>"
                )
            elif tagged not in document.images:
                yield ConfigIssue(
                    key, f"names its own digest, but {named} does not hold {tagged}: run `python -m platform_tools lock-images`"
                )
            elif document.images[tagged] != digest:
                yield ConfigIssue(
                    key,
                    f"names {digest}, but {named} holds {document.images[tagged]} for {tagged}: the tag no longer points "
                    "to that digest, or it was never its digest",
                )
