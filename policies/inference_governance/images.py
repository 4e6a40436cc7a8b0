"""Images: from an allowed repository, pinned to a digest or a tag that is not mutable; by digest in production."""

from __future__ import annotations

import re
from typing import Any

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
    program pins, not their whole registries: ghcr.io/llm-d/... allows no other ghcr.io image)."""
    settings = config(args)
    allowed = set(settings.get("allowedRepositories", PINNED_REPOSITORIES))
    denied = set(settings.get("deniedTags", FORBIDDEN_TAGS))
    template = pod_template(args.resource_type, args.props)
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


# How a chart's values hold an image's digest, by the form its templates join it in (platform_config/chart_images.py).
_DIGEST = FACTS["images"]["digestPattern"]
_CHART_DIGEST_FORMS = {
    "digest": re.compile(_DIGEST),
    "sha": re.compile(_DIGEST.removeprefix("sha256:")),
    "tag": re.compile(f"{FACTS['images']['tagPattern']}@{_DIGEST}"),
    "image": re.compile(f"[^@]+@{_DIGEST}"),
}
_CHART_DIGEST_SHOWN = {
    "digest": "the digest (sha256:<hex>)",
    "sha": "the digest's hex",
    "tag": "<tag>@sha256:<hex>",
    "image": "the image with its digest",
}
CHART_IMAGES: dict[str, dict[str, list[dict[str, str]]]] = FACTS["images"]["charts"]


def _release_image_digests(props: Any, report_violation: Report) -> None:
    """A release of a chart whose images the platform knows sets each one's digest where the chart's templates read
    it: a release's pods are rendered by Helm at `up`, which the pack never sees."""
    chart = str(get(props, "chart", default="")).rsplit("/", 1)[-1]
    images = CHART_IMAGES.get(chart, {}).get(str(get(props, "version", default="")), [])
    values = get(props, "values", default={})
    for image in images:
        value = get(values, *image["key"].split("."), default=None)
        if not (isinstance(value, str) and _CHART_DIGEST_FORMS[image["form"]].fullmatch(value)):
            report_violation(
                f"release of chart {chart} runs {image['reference']} ({image['what']}) by tag in production: set "
                f"{image['key']} to {_CHART_DIGEST_SHOWN[image['form']]} (`python -m platform_tools lock-images "
                "<stack>`, then set images.lockFile to the file it writes)"
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
