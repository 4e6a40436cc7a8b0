"""The model servers' images pre-pulled on every GPU node: a namespace and one DaemonSet per pool
that runs models (components/specs/image_prepull.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from .constants import PACKAGE
from .k8s_objects import KubernetesObject
from .specs.image_prepull import prepull_daemonset, prepull_name, prepull_namespace


@dataclass(frozen=True)
class ImagePrePullArgs:
    # (pool, the images its model servers run), pools in the stack's order.
    images_by_pool: tuple[tuple[str, tuple[str, ...]], ...]


class ImagePrePull(pulumi.ComponentResource):
    def __init__(self, name: str, args: ImagePrePullArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:image-prepull:ImagePrePull", name, None, opts)
        namespace = KubernetesObject(f"{name}-namespace", prepull_namespace(), pulumi.ResourceOptions(parent=self))
        for pool, images in args.images_by_pool:
            KubernetesObject(
                f"{name}-{prepull_name(pool)}",
                prepull_daemonset(pool, images),
                pulumi.ResourceOptions(parent=self, depends_on=[namespace]),
            )
        self.register_outputs({"pools": [pool for pool, _ in args.images_by_pool]})
