"""The governance floors the config checks and the policy pack share: one number each.

The pack enforces these on the rendered objects (its per-policy config may move them); the
config checks refuse a stack that would break them at its defaults, so a value the pack would
refuse at `pulumi preview` is refused at the stack file, naming the key. The pack reads them from
`platform_facts.json` (`components/policy_facts.py`), under its own config keys.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GovernanceFloors:
    # inference-graceful-drain: in-flight requests need minutes to finish; the endpoint must
    # leave every load balancer (kube-proxy, Istio, the NLB) before vLLM gets SIGTERM.
    termination_grace_period_seconds: int = 300
    pre_stop_seconds: int = 5
    # hpa-behavior: a replica takes minutes to load a model, so scale-down is slow.
    hpa_scale_down_stabilization_seconds: int = 300
    hpa_scale_down_percent_per_minute: float = 50
    hpa_min_replicas_in_production: int = 2
    # knative-autoscaling (production): Knative's defaults (0 s delay, a 60 s window)
    # would tear replicas down on every dip.
    knative_scale_down_delay_seconds: int = 60
    knative_window_seconds: int = 60
    # The endpoint picker stands in every request's path to its model version: with one replica,
    # its restart is the version's outage (control-plane-availability).
    endpoint_picker_replicas_in_production: int = 2
    # control-plane-availability: what every request depends on (istiod, the gateway, Knative's
    # activator, autoscaler, controller, webhook and net-istio's, Kueue's manager, the cluster
    # autoscaler) runs this many replicas in production, so a node drain or a crash takes none of it away.
    control_plane_replicas_in_production: int = 2

    def policy_defaults(self) -> dict[str, float]:
        """The floors under the policy pack's config keys."""
        return {
            "minTerminationGracePeriodSeconds": self.termination_grace_period_seconds,
            "minPreStopSeconds": self.pre_stop_seconds,
            "minScaleDownStabilizationSeconds": self.hpa_scale_down_stabilization_seconds,
            "maxScaleDownPercentPerMinute": self.hpa_scale_down_percent_per_minute,
            "minReplicasInProduction": self.hpa_min_replicas_in_production,
            "minScaleDownDelaySeconds": self.knative_scale_down_delay_seconds,
            "minWindowSeconds": self.knative_window_seconds,
            # control-plane-availability's minEndpointPickerReplicasInProduction.
            "minEndpointPickerReplicasInProduction": self.endpoint_picker_replicas_in_production,
            "minControlPlaneReplicasInProduction": self.control_plane_replicas_in_production,
        }


FLOORS = GovernanceFloors()


def control_plane_replicas(environment: str) -> int | None:
    """The replicas of each part of what every request depends on that a stack of this environment runs:
    production's floor (control-plane-availability), else None, the charts' and manifests' own (one each)."""
    return FLOORS.control_plane_replicas_in_production if environment == "production" else None
