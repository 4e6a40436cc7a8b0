"""The container images' lock file: the digest each image reference the platform renders resolved to."""

from __future__ import annotations

from typing import Annotated

from .base import ConfigModel, _full_match
from .registry import LOCK_FILE_PATTERN


class ImagesConfig(ConfigModel):
    """The images the platform runs, pinned by digest: `python -m platform_tools lock-images <stack>` asks each
    image's registry (where the registries are reachable) what every image reference the stack renders points to now
    and writes the answers as the lock file; committed, reviewed and named here, it makes every pod the program renders
    pull `<reference>@sha256:<digest>`, so a tag moved later (or a registry answering otherwise) changes nothing a node
    pulls. The policy pack's `image-digests` refuses, in production, a pod whose images carry no digest."""

    lock_file: (
        Annotated[
            str,
            _full_match(
                LOCK_FILE_PATTERN,
                "is not a .json file in the stack files' folder, such as stacks/Pulumi.prod.images.json (a committed "
                "file beside the stack file)",
                max_length=512,
            ),
        ]
        | None
    ) = None
    """The image lock file this stack deploys from, e.g. `stacks/Pulumi.prod.images.json` (written by `python -m
    platform_tools lock-images`). It must hold every image the stack renders (the pinned images and each version's
    own `image`): a preview stops, naming this key and the image, on one it lacks. None: images by tag (the pack's
    `image-digests` refuses that in production)."""
