"""An endpoint picker's plan (`EndpointPickerPlan`, with one `PickerBand` per tier): what the builders of
components/specs/endpoint_picker/ read, resolved by components/plan.py. On the ground floor with
shapes.py, whose ServerPlan holds one."""

from __future__ import annotations

from dataclasses import dataclass

from platform_config.pins import ENDPOINT_PICKER, ENVOY_PROXY


@dataclass(frozen=True)
class PickerBand:
    tier: str  # premium | standard | batch
    priority: int  # EPP priority: higher is served first; negative = sheddable (llm-d: IsSheddable p < 0)
    max_requests: int  # per-band queued requests (PriorityBandConfig.maxRequests)
    max_bytes: str  # per-band queued bytes, a Kubernetes quantity such as "256Mi" (PriorityBandConfig.maxBytes)
    # The longest a request of this tier waits for the EPP to pick a server (the tier's
    # queueTimeout): timed by the proxy per tier (`picker_routes`), since the EPP has one TTL.
    queue_seconds: int


@dataclass(frozen=True)
class EndpointPickerPlan:
    name: str  # the model version's server name; EPP objects are f"{name}-epp", the InferencePool `name`
    namespace: str  # tenant namespace (the model servers' namespace)
    server_labels: dict[str, str]  # labels selecting this version's vLLM pods (network rules; the pool's by default)
    # The FQDN of a Service on target_port over those pods (the version's own, e.g.
    # "llama-70b-v1.serving.svc.cluster.local"): the EPP pod's sidecar reaches the pods through it.
    server_host: str
    # The port the picked pod is dialled on: vLLM's (8000), or Knative queue-proxy's (8012).
    target_port: int
    replicas: int  # EPP pods, >= 1; 2+ run active-active (leader election off)
    bands: tuple[PickerBand, ...]  # one per tier the server takes
    request_timeout_seconds: int  # the longest a request may take end to end
    labels: dict[str, str]  # standard labels to put on every object
    # Where the pods run: the EKS system node group's labels; empty on a cluster the platform
    # does not build (its scheduler places them).
    node_selector: dict[str, str]
    # Whether the servers load LoRA adapters: then the picker scores adapter affinity too.
    lora_affinity: bool = False
    # What the InferencePool selects, where narrower than server_labels: a Knative version's
    # current revision (its older revisions' pods carry the same server labels until Knative
    # scales them away, and must not be picked). None: server_labels.
    pool_labels: dict[str, str] | None = None
    # The images its two containers pull: the pins, with their digests where the stack's image lock holds them.
    image: str = ENDPOINT_PICKER.image
    proxy_image: str = ENVOY_PROXY.image
