"""Images: from an allowed repository, pinned to a digest or a tag that is not mutable; by digest in production."""

from __future__ import annotations

import re
from typing import Any, Mapping

from .kube import (
    FACTS,
    FORBIDDEN_TAGS,
    HELM_RELEASE,
    PINNED_REPOSITORIES,
    Report,
    config,
    every_container,
    get,
    image_has_digest,
    image_is_pinned,
    image_repository,
    image_tag,
    is_production,
    is_sidecar_stub,
    opts_out_of_injection_or_host_network,
    pod_template,
)


def _repository_allowed(repository: str, allowed: set[str]) -> bool:
    """An allowed entry names a repository, or everything under a prefix of whole path parts (a
    registry, an account's registry, an organisation)."""
    return any(repository == entry or repository.startswith(entry.rstrip("/") + "/") for entry in allowed)


def pinned_images(args: Any, report_violation: Report) -> None:
    """Images come from allowed repositories (by default the repositories of the images the
    program pins, not their whole registries: ghcr.io/llm-d/... allows no other ghcr.io image); a chart's release runs
    its images from its chart's own repositories, and only a pinned chart; no pod names its own mesh proxy."""
    if args.resource_type == HELM_RELEASE:
        _release_sources(args.props, report_violation)
        return
    if args.resource_type == KNATIVE_SERVING:
        _knative_serving_images(args.props, report_violation)
        return
    settings = config(args)
    allowed = set(settings.get("allowedRepositories", PINNED_REPOSITORIES))
    denied = set(settings.get("deniedTags", FORBIDDEN_TAGS))
    template = pod_template(args.resource_type, args.props)
    proxy_image = get(template or {}, "metadata", "annotations", PROXY_IMAGE_ANNOTATION, default=None)
    if proxy_image is not None:
        report_violation(
            f"the pod template's {PROXY_IMAGE_ANNOTATION} annotation ({proxy_image!r}) swaps the mesh's proxy image for "
            "its own: the mesh's proxy is the one the istiod release pins (global.proxy.image)"
        )
    for container in every_container(get(template, "spec", default={})) if template is not None else ():
        name = get(container, "name", default="?")
        image = str(get(container, "image", default=""))
        if is_sidecar_stub(container) and template is not None and not opts_out_of_injection_or_host_network(template):
            continue  # the mesh's injector merges its sidecar into it, image included
        repository = image_repository(image)
        if not _repository_allowed(repository, allowed):
            report_violation(
                f"container '{name}' pulls from repository {repository!r}, which is not allowed; allowed: "
                f"{', '.join(sorted(allowed))}"
            )
        if image_is_pinned(image, denied):
            continue
        tag = image_tag(image)
        if tag is None:
            report_violation(f"container '{name}' runs image {image!r} with no tag (it means 'latest'): pin a tag or a digest")
        else:
            report_violation(
                f"container '{name}' runs image {image!r}: tag {tag!r} is mutable (denied: {', '.join(sorted(denied))}); pin "
                "a release tag or a digest"
            )


# By chart and version (platform_config/chart_images.py): where each image a chart runs takes its digest, in the form
# its templates join it in, the values it comes from, and what no release may set.
CHART_IMAGES: dict[str, dict[str, dict[str, Any]]] = FACTS["images"]["charts"]
_DIGEST = FACTS["images"]["digestPattern"]
_DIGEST_ALONE = re.compile(_DIGEST)
_HEX_ALONE = re.compile(_DIGEST.removeprefix("sha256:"))
PROXY_IMAGE_ANNOTATION = "sidecar.istio.io/proxyImage"
KNATIVE_SERVING = "kubernetes:operator.knative.dev/v1beta1:KnativeServing"


def _digest_value(image: Mapping[str, Any]) -> tuple[re.Pattern[str], str]:
    """What `image`'s key must hold to pin it, and how to say so: the digest, its hex, the chart's own tag with the
    digest, or the whole reference with it."""
    reference = str(image["reference"])
    tag = reference.rsplit(":", 1)[1]
    return {
        "digest": (re.compile(_DIGEST), "the digest (sha256:<hex>)"),
        "sha": (re.compile(_DIGEST.removeprefix("sha256:")), "the digest's hex"),
        "tag": (re.compile(re.escape(tag) + "@" + _DIGEST), f"{tag}@sha256:<hex>"),
        "image": (re.compile(re.escape(reference) + "@" + _DIGEST), f"{reference}@sha256:<hex>"),
    }[str(image["form"])]


def _chart_of(props: Any) -> tuple[str, str, dict[str, Any] | None]:
    """A release's chart, its version, and what the platform knows of its images (None: nothing)."""
    chart = str(get(props, "chart", default="")).rsplit("/", 1)[-1]
    version = str(get(props, "version", default=""))
    return chart, version, CHART_IMAGES.get(chart, {}).get(version)


def _release_sources(props: Any, report_violation: Report) -> None:
    """A release runs its chart's images from where the chart's own values say, and only charts the platform has read:
    an image's repository changed beside its digest, or a chart nobody read, runs anyone's code."""
    chart, version, known = _chart_of(props)
    if known is None:
        report_violation(
            f"release of chart {chart} {version}: its images are not known to the platform (platform_config/"
            "chart_images.py reads each pinned chart's at its version); install only the pinned charts"
        )
        return
    values = get(props, "values", default={})
    for key in known["unset"]:
        if get(values, *key.split("."), default=None) is not None:
            report_violation(f"release of chart {chart} sets {key}, which moves every image the chart runs: leave it unset")
    for image in known["images"]:
        _pinned_digest_key(chart, image, get(values, *image["key"].split("."), default=None), report_violation)
        for key, expected in image["source"].items():
            value = get(values, *key.split("."), default=None)
            if value is not None and value != expected:
                report_violation(
                    f"release of chart {chart} sets {key} to {value!r}: {image['what']} comes from {expected!r} only"
                )


# What in a KnativeServing would replace the images of Serving's own manifests, each pinned by digest in the operator's
# release (knative/operator knative-v1.23.0 pkg/apis/operator/base/common.go CommonSpec: Registry.Default and
# .Override, Manifests, AdditionalManifests; the queue-proxy image is config-deployment's queue-sidecar-image).
_KNATIVE_IMAGE_FIELDS = (
    ("registry", "default"),
    ("registry", "override"),
    ("manifests",),
    ("additionalManifests",),
    ("config", "deployment", "queue-sidecar-image"),
)


def _knative_serving_images(props: Any, report_violation: Report) -> None:
    """Knative Serving runs the images its release's manifests name by digest, which the operator applies from its own
    image: nothing in the KnativeServing may name others."""
    for path in _KNATIVE_IMAGE_FIELDS:
        if get(props, "spec", *path, default=None):
            report_violation(
                f"KnativeServing sets spec.{'.'.join(path)}, which replaces images of Serving's own manifests (each pinned "
                "by digest in the operator's release): leave it unset"
            )


def _pinned_digest_key(chart: str, image: Mapping[str, Any], value: Any, report_violation: Report) -> None:
    """The digest's key holds the chart's own image: its tag or whole reference where the key also names those (any
    digest may follow), the chart's tag or a digest where it is a version, a digest's hex where it is a `sha`."""
    if value is None:
        return
    reference = str(image["reference"])
    tag = reference.rsplit(":", 1)[1]
    shown = str(value).split("@", 1)[0]
    allowed = {
        "tag": shown == tag,
        "image": shown == reference,
        "digest": str(value) == tag or _DIGEST_ALONE.fullmatch(str(value)) is not None,
        "sha": _HEX_ALONE.fullmatch(str(value)) is not None,
    }[str(image["form"])]
    if not allowed:
        report_violation(
            f"release of chart {chart} sets {image['key']} to {value!r}: {image['what']} is {reference!r} at the pinned "
            "chart, by its tag or a digest"
        )


def _release_image_digests(props: Any, report_violation: Report) -> None:
    """A release of a chart whose images the platform knows sets each one's digest where the chart's templates read
    it: a release's pods are rendered by Helm at `up`, which the pack never sees."""
    chart, _, known = _chart_of(props)
    values = get(props, "values", default={})
    for image in (known or {}).get("images", []):
        pattern, shown = _digest_value(image)
        value = get(values, *image["key"].split("."), default=None)
        if not (isinstance(value, str) and pattern.fullmatch(value)):
            report_violation(
                f"release of chart {chart} runs {image['reference']} ({image['what']}) by tag in production: set "
                f"{image['key']} to {shown} (`python -m platform_tools lock-images <stack>`, then set images.lockFile "
                "to the file it writes)"
            )


def image_digests(args: Any, report_violation: Report) -> None:
    """In production every image a pod pulls is named by its digest (the stack's `images.lockFile`), the charts' images
    included: a tag can be moved to other content, after review or between two nodes' pulls; a digest cannot."""
    if not is_production(args):
        return
    if args.resource_type == HELM_RELEASE:
        _release_image_digests(args.props, report_violation)
        return
    template = pod_template(args.resource_type, args.props)
    if template is None:
        return
    for container in every_container(get(template, "spec", default={})):
        if is_sidecar_stub(container) and not opts_out_of_injection_or_host_network(template):
            continue  # the mesh's injector merges its sidecar into it, image included
        image = str(get(container, "image", default=""))
        if not image_has_digest(image):
            report_violation(
                f"container '{get(container, 'name', default='?')}' runs image {image!r} by tag in production: pin it by "
                "digest (`python -m platform_tools lock-images <stack>`, then set images.lockFile to the file "
                "it writes)"
            )
