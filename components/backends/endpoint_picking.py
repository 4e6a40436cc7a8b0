"""What every backend that puts an endpoint picker in front of its servers shares: the picker's
objects beside each version's servers, the gateway's route to the version's picker (which queues
the request in its tier's band and picks the replica), the per-version DestinationRules on the
pickers' Services, and the config rules of a picked model. Not a backend itself (it defines no
`ServingBackend`), so the registry skips it."""

from __future__ import annotations

from collections.abc import Iterator

from platform_config.errors import ConfigIssue
from platform_config.floors import FLOORS
from platform_config.models import ModelConfig, PlatformConfig, ServerArgs
from platform_config.serving import server_name

from ..constants import KUBERNETES_API_GROUPS
from ..picker_plan import EndpointPickerPlan
from ..shapes import Destination, Role, ServerObject, ServerPlan, SubsetRule
from ..specs.endpoint_picker.headers import OBJECTIVE_HEADER
from ..specs.endpoint_picker.names import (
    EPP_PROXY_PORT,
    OBJECTIVE_GROUP,
    POOL_GROUP,
    epp_host_of,
    epp_name_of,
    epp_selector_of,
    objective_of,
)
from ..specs.endpoint_picker.objects import endpoint_picker_objects

# What the picker's custom objects wait for: their CRDs (monitors: the Prometheus Operator's;
# mesh rules: Istio's).
OBJECT_ROLES: dict[str, Role] = {
    "monitoring.coreos.com": "monitor",
    "networking.istio.io": "mesh",
    "security.istio.io": "mesh",
    POOL_GROUP: "inference-pool",
    OBJECTIVE_GROUP: "inference-pool",
}


def endpoint_picker_server_objects(
    plan: ServerPlan, picker: EndpointPickerPlan | None, *, pool_after_pods: bool = False
) -> list[ServerObject]:
    """The version's endpoint picker (`picker`, the plan's or one the backend narrowed), its
    InferencePool and objectives, and the mesh and network rules that let it reach the servers.
    Routes wait for the picker's pods and Service; with `pool_after_pods` the pool changes only
    once the server's pods object is ready (a pool that selects a new revision waits for it)."""
    if picker is None:
        return []
    objects = []
    for manifest in endpoint_picker_objects(picker):
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        group = manifest["apiVersion"].rpartition("/")[0]
        # Resource names stay unique per server: kinds repeat (ConfigMaps, objectives, policies).
        suffix = "-".join(filter(None, (name.removeprefix(plan.name).strip("-"), kind.lower())))
        # The picker's pods are the mesh's like the servers': they wait for what pods wait for.
        role: Role = "pods" if kind == "Deployment" else OBJECT_ROLES.get(group, "plain")
        serves = kind in ("Deployment", "Service", "InferencePool")
        after_pods = pool_after_pods and kind == "InferencePool"
        custom = group not in KUBERNETES_API_GROUPS
        objects.append(ServerObject(suffix, manifest, role, custom=custom, serves=serves, after_pods=after_pods))
    return objects


def picker_destination(model: ModelConfig, version: str, subset: str, tier: str) -> Destination:
    """Through the version's endpoint picker, which queues the request in its tier's band (the
    objective the route names) and picks the replica."""
    name = server_name(model, version)
    objective = ((OBJECTIVE_HEADER, objective_of(name, tier)),)
    return Destination(epp_host_of(name, model.tenant), subset, EPP_PROXY_PORT, objective)


def picker_subset_labels(model: ModelConfig, version: str) -> dict[str, str]:
    """A picked version's subsets are its picker's pods."""
    return epp_selector_of(server_name(model, version))


def picker_subset_rules(model: ModelConfig, versions: tuple[str, ...]) -> list[SubsetRule]:
    """One rule per version, on its endpoint picker's Service. The picker path's refusals (429
    with a dropped reason: a queue full or timed out, no replica ready, the picker unreachable)
    must not eject a picker pod."""
    rules = []
    for version in versions:
        name = server_name(model, version)
        rules.append(SubsetRule(epp_name_of(name), epp_host_of(name, model.tenant), (version,), eject_hosts=False))
    return rules


def picker_config_issues(
    config: PlatformConfig, index: int, model: ModelConfig, picked: bool, *, needs_no_picker: bool = False
) -> Iterator[ConfigIssue]:
    """Every tier's wait is timed, which only the endpoint picker's queue does: a model goes without
    its picker only where it does what a picker cannot (`needs_no_picker`: a Knative model that
    scales to zero), and never in production. A picked model's servers keep no
    admission bound of their own, so a prefill rate (what that bound is predicted from) would be
    ignored; production keeps more than one picker pod."""
    production = config.environment == "production"
    if picked:
        servers: list[tuple[tuple[str | int, ...], ServerArgs]] = [(("models", index, "server"), model.server)]
        servers += [(("models", index, "versions", i, "server"), v.server) for i, v in enumerate(model.versions)]
        for path, server in servers:
            if server.prefill_tokens_per_second is not None:
                yield ConfigIssue(
                    (*path, "prefillTokensPerSecond"),
                    "set, but the model's endpoint picker times every tier's wait and its servers keep no admission "
                    "bound the rate would size: remove it",
                )
        if production and model.endpoint_picker.replicas < FLOORS.endpoint_picker_replicas_in_production:
            yield ConfigIssue(
                ("models", index, "endpointPicker", "replicas"),
                f"production keeps at least {FLOORS.endpoint_picker_replicas_in_production} endpoint picker replicas: "
                "with one, every request to the model waits on a single pod's restart",
            )
    elif production:
        yield ConfigIssue(
            ("models", index, "endpointPicker", "enabled"),
            "production times every tier's wait, which only the endpoint picker's queue does: without it only vLLM's "
            "admission bounds the queue, in requests and never in time (504 at the route timeout); remove "
            "`enabled: false`",
        )
    elif not needs_no_picker:
        yield ConfigIssue(
            ("models", index, "endpointPicker", "enabled"),
            "every tier's wait is timed (503 with the tier's Retry-After past its queueTimeout), which only the "
            "endpoint picker's queue does: without it only vLLM's admission bounds the queue, in requests and never "
            "in time (504 at the route timeout); remove `enabled: false`",
        )
