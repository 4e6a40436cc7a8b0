"""Images: from an allowed repository, pinned to a digest or a tag that is not mutable; by digest in production."""

from __future__ import annotations

from typing import Any

from .kube import (
    FORBIDDEN_TAGS,
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


def image_digests(args: Any, report_violation: Report) -> None:
    """In production every image a pod pulls is named by its digest (the stack's `images.lockFile`): a tag can be moved
    to other content, after review or between two nodes' pulls; a digest cannot."""
    if not is_production(args):
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
