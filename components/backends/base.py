"""What a serving backend is: one way of running a model version's vLLM servers.

A backend owns everything about its mode: the objects of a version's server and of the model,
how a rollout surges and what the cluster injects into its pods (its capacity demand), where
the gateway sends a version's traffic (its route target), how a replica drains (the pod's
shape), which platform machinery it needs, and the config rules that hold only for it. The rest
of the program asks the model's backend and never branches on the mode. A new mode is one module
in this package and one line in its registry (`components/backends/__init__.py`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from platform_config.errors import ConfigIssue
from platform_config.models import ModelConfig, NodePoolConfig, PlatformConfig

if TYPE_CHECKING:  # the plan imports the backends
    from ..plan import ModelPlan, ServerPlan

# How a server's object is registered:
# - "pods": makes pods (waits for what pods need; `pulumi up` waits until it is ready);
# - "plain": needs its namespace only;
# - "monitor": a Prometheus Operator object (waits for its CRDs);
# - "autoscaler": scales the "pods" object (waits for it and for the backend's machinery).
Role = Literal["pods", "plain", "monitor", "autoscaler"]


@dataclass(frozen=True)
class ServerObject:
    # The resource's name is `<server name>-<suffix>` (never rename without aliases).
    suffix: str
    manifest: dict[str, Any]
    role: Role
    # A custom resource (CRD-backed) rather than a built-in kind.
    custom: bool = False
    # Routes wait for it before sending traffic to the version.
    serves: bool = False
    # Fields another controller owns once the object exists.
    ignore_changes: tuple[str, ...] = ()


@dataclass(frozen=True)
class PodShape:
    """How a backend's pods differ: the port's name, how probes name the port, and whether
    the pod drains itself (a preStop hook, the grace period and spread in the pod spec) or its
    platform drains it (Knative's queue-proxy)."""

    port_name: str
    probe_port: str | int
    drains_in_pod: bool


@dataclass(frozen=True)
class Destination:
    """Where the gateway sends one tier of one version."""

    host: str
    subset: str
    port: int
    # Versions reached through a shared gateway are addressed by Host header.
    host_header: str | None = None

    def route(self, weight: int | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"destination": {"host": self.host, "subset": self.subset, "port": {"number": self.port}}}
        if self.host_header is not None:
            out["headers"] = {"request": {"set": {"Host": self.host_header}}}
        if weight is not None:
            out["weight"] = weight
        return out


class ServingBackend(ABC):
    # The `autoscaling.mode` value that selects it.
    mode: ClassVar[str]
    # Platform machinery it needs installed ("metrics-adapter", "knative").
    machinery: ClassVar[frozenset[str]] = frozenset()
    # Whether its servers may scale to zero.
    scales_to_zero: ClassVar[bool] = False
    pod_shape: ClassVar[PodShape]
    # When its versions sit behind a shared gateway, their subsets share one gateway-wide
    # DestinationRule: its (object name, resource name suffix). None: one rule per model, in
    # the model's namespace, on the versions' own pods.
    shared_destination_rule: ClassVar[tuple[str, str] | None] = None

    # --- capacity -------------------------------------------------------------------------

    @abstractmethod
    def rollout_surge(self, model: ModelConfig) -> int:
        """Pods a version's rollout adds while the old ones still serve."""

    def request_cap(self, config: PlatformConfig, model: ModelConfig) -> int | None:
        """A hard cap of requests in flight per replica, if the backend enforces one."""
        return None

    def injected_containers(self) -> tuple[Mapping[str, str], ...]:
        """Requests (= memory limits) of the containers the backend's platform adds to each pod,
        besides the mesh's sidecar."""
        return ()

    # --- config rules that hold for this backend only ------------------------------------

    def config_issues(
        self, config: PlatformConfig, index: int, model: ModelConfig, pool: NodePoolConfig
    ) -> Iterator[ConfigIssue]:
        return iter(())

    # --- objects ---------------------------------------------------------------------------

    @abstractmethod
    def server_objects(self, plan: ServerPlan) -> list[ServerObject]:
        """Every object of one version's server, in registration order."""

    def model_objects(self, model: ModelPlan) -> list[ServerObject]:
        """Objects the model's versions share (registered before its routes)."""
        return []

    # --- traffic ---------------------------------------------------------------------------

    @abstractmethod
    def destination(self, model: ModelConfig, version: str, tier: str) -> Destination:
        """Where the gateway sends `tier` requests for `version`."""

    @abstractmethod
    def subset_name(self, model: ModelConfig, version: str, tier: str) -> str:
        """The DestinationRule subset of one tier of one version."""

    @abstractmethod
    def subset_labels(self, model: ModelConfig, version: str) -> dict[str, str]:
        """The labels that pick the subset's hosts."""

    @abstractmethod
    def destination_rule_host(self, model: ModelConfig) -> str:
        """The host the version subsets are defined on."""

    # Whether a subset's hosts are the model's own servers (outlier detection may eject one)
    # or a shared gateway's pods (a model's errors must not eject a gateway).
    subsets_are_servers: ClassVar[bool] = True

    def tenant_ingress(self) -> tuple[tuple[str, str], ...]:
        """(NetworkPolicy name, namespace) of platform components in the data path of the
        tenant's servers, which its isolation must let in."""
        return ()
