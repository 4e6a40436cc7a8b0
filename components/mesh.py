"""The Istio service mesh (pinned Helm releases: base, CNI node agent, istiod, ingress gateway).

The CNI node agent sets up traffic redirection, so injected pods need no NET_ADMIN init
container and tenant namespaces can enforce the `restricted` Pod Security Standard. Metrics
merging lets Prometheus scrape application metrics through the sidecar while mTLS is STRICT.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from platform_config.pins import ISTIO_BASE, ISTIO_CNI, ISTIO_GATEWAY, ISTIOD, ChartPin

from .constants import ISTIO_SYSTEM_NAMESPACE, PACKAGE, PRIVILEGED
from .k8s_objects import helm_release, system_namespace
from .specs.traffic import GATEWAY_SELECTOR, GATEWAY_SERVICE_ACCOUNT


def istiod_values() -> dict:
    return {
        "pilot": {"cni": {"enabled": True}},
        "meshConfig": {"enablePrometheusMerge": True},
        # Start application containers only once the sidecar is ready (the injection template
        # reads this value: istio 1.30.3 files/injection-template.yaml).
        "global": {"proxy": {"holdApplicationUntilProxyStarts": True}},
    }


def gateway_values(on_aws: bool) -> dict:
    service: dict = {"type": "LoadBalancer"}
    if on_aws:
        service["annotations"] = {"service.beta.kubernetes.io/aws-load-balancer-type": "nlb"}
    return {
        "labels": {**GATEWAY_SELECTOR, "app": GATEWAY_SERVICE_ACCOUNT},
        "service": service,
        "autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 10},
        # No CPU limit (throttling the gateway adds latency to every request). The chart's
        # default limits.cpu (2000m) survives a values map without the key; its resources
        # helper drops a key whose value is empty (istio 1.30.3 manifests/charts/gateway/
        # templates/_helpers.tpl, "gateway.resources": `if $value`), so "" removes it.
        "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "", "memory": "1Gi"}},
    }


@dataclass(frozen=True)
class MeshArgs:
    on_aws: bool


class Mesh(pulumi.ComponentResource):
    base: k8s.helm.v3.Release
    istiod: k8s.helm.v3.Release
    gateway: k8s.helm.v3.Release

    def __init__(self, name: str, args: MeshArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:mesh:Mesh", name, None, opts)
        # The CNI node agent runs privileged on every node.
        namespace = system_namespace(f"{name}-namespace", ISTIO_SYSTEM_NAMESPACE, "mesh", pulumi.ResourceOptions(parent=self), **PRIVILEGED)

        def release(suffix: str, chart: ChartPin, release_name: str, values: dict, after: list[pulumi.Resource]) -> k8s.helm.v3.Release:
            return helm_release(f"{name}-{suffix}", release_name, ISTIO_SYSTEM_NAMESPACE, chart, values, pulumi.ResourceOptions(parent=self, depends_on=after))

        self.base = release("base", ISTIO_BASE, "istio-base", {}, [namespace])
        cni = release("cni", ISTIO_CNI, "istio-cni", {}, [self.base])
        self.istiod = release("istiod", ISTIOD, "istiod", istiod_values(), [self.base, cni])
        self.gateway = release("gateway", ISTIO_GATEWAY, GATEWAY_SERVICE_ACCOUNT, gateway_values(args.on_aws), [self.istiod])
        self.register_outputs({"version": ISTIOD.version})
