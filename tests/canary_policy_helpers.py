"""What the tests of policy canary-weight-steps share (tests/test_canary_policy.py,
tests/test_canary_policy_adapters.py): releases in their output form, routes carrying release
annotations, and a validator's violations collected."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from platform_config import release as release_record


def as_output(releases: dict[str, release_record.Release] | None) -> dict[str, Any] | None:
    """Releases read back, in the output form they were read from."""
    return None if releases is None else {name: release_record.to_output(release) for name, release in releases.items()}


def copy_of(raw: dict[str, Any]) -> dict[str, Any]:
    import copy

    return copy.deepcopy(raw)


VIRTUAL_SERVICE = "kubernetes:networking.istio.io/v1:VirtualService"


def route(name: str = "chat", **annotations: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "team-a", "annotations": annotations}, "spec": {}}


def released(stable: str, canary_version: str | None, weight: int, override: str | None = None) -> dict[str, Any]:
    annotations = {
        "inference.platform/stable-version": stable,
        "inference.platform/canary-weight": str(weight),
        "inference.platform/canary-steps": "10,25,50,100",
    }
    if canary_version is not None:
        annotations["inference.platform/canary-version"] = canary_version
    if override is not None:
        annotations["inference.platform/canary-step-override"] = override
    return route(**annotations)


def violations(validator, props: dict[str, Any], config: dict[str, Any] | None, type_: str = VIRTUAL_SERVICE) -> list[str]:
    found: list[str] = []
    args = SimpleNamespace(resource_type=type_, props=props, urn="urn:test", get_config=lambda: config)
    validator(args, lambda message, urn=None: found.append(message))
    return found


PREVIOUS_10 = {"previousReleases": {"chat": {"stable": "v1", "canary": "v2", "canaryWeight": 10}}}
