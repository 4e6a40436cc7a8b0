"""The Istio service mesh (pinned Helm releases: base, CNI node agent, istiod, ingress gateway).

The CNI node agent sets up traffic redirection, so injected pods need no NET_ADMIN init
container and tenant namespaces can enforce the `restricted` Pod Security Standard. Metrics
merging lets Prometheus scrape application metrics through the sidecar while mTLS is STRICT.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from platform_config.models import LoadBalancerScheme
from platform_config.pins import ISTIO_BASE, ISTIO_CNI, ISTIO_GATEWAY, ISTIOD, ChartPin

from .constants import GATEWAY_SELECTOR, GATEWAY_SERVICE_ACCOUNT, ISTIO_SYSTEM_NAMESPACE, PACKAGE, PRIVILEGED
from .k8s_objects import helm_release, system_namespace

# Envoy's overload manager: Istio's bootstrap always declares the
# `global_downstream_max_connections` resource monitor, at 2^31 - 1 connections unless the proxy
# config's `proxyMetadata` names a number (istio/istio 1.30.3 tools/packaging/common/
# envoy_bootstrap.json `overload_manager`, pkg/bootstrap/config.go
# ISTIO_META_GLOBAL_DOWNSTREAM_MAX_CONNECTIONS). Past it a proxy refuses new connections instead
# of accepting them without bound (each active one's buffer is bounded by the gateway's
# EnvoyFilter). Set for every proxy of the mesh (the gateway's chart passes pod annotations, but
# the platform's upstream check does not yet take `podAnnotations` as free-form); a model
# server's sidecar is reached through the gateway pods' connection pools (`traffic.tiers`
# maxRequests per pod and subset), so only a single replica behind a fully scaled gateway could
# meet the cap.
MAX_DOWNSTREAM_CONNECTIONS_PER_PROXY = 8192


def istiod_values() -> dict:
    return {
        "pilot": {"cni": {"enabled": True}},
        "meshConfig": {
            "enablePrometheusMerge": True,
            "defaultConfig": {
                "proxyMetadata": {"ISTIO_META_GLOBAL_DOWNSTREAM_MAX_CONNECTIONS": str(MAX_DOWNSTREAM_CONNECTIONS_PER_PROXY)}
            },
        },
        # Start application containers only once the sidecar is ready (the injection template
        # reads this value: istio 1.30.3 files/injection-template.yaml).
        "global": {"proxy": {"holdApplicationUntilProxyStarts": True}},
    }


# The listeners of the chart's Service ports the platform serves (80, 443).
GATEWAY_LISTENERS = ("TCP-80", "TCP-443")


def nlb_annotations(idle_timeout_seconds: int, scheme: LoadBalancerScheme) -> dict[str, str]:
    """An NLB from the AWS Load Balancer Controller (the in-tree provider ignores `external`),
    sending to pod IPs, with every listener's TCP idle timeout raised (default 350 s;
    kubernetes-sigs/aws-load-balancer-controller v3.5.0 docs/guide/service/annotations.md,
    listener-attributes). The scheme is always written: without the annotation the controller
    keeps an existing NLB's scheme (docs/guide/service/nlb.md, "Secure by default")."""
    annotations = {
        "service.beta.kubernetes.io/aws-load-balancer-type": "external",
        "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type": "ip",
        "service.beta.kubernetes.io/aws-load-balancer-scheme": scheme,
    }
    for listener in GATEWAY_LISTENERS:
        annotations[f"service.beta.kubernetes.io/aws-load-balancer-listener-attributes.{listener}"] = (
            f"tcp.idle_timeout.seconds={idle_timeout_seconds}"
        )
    return annotations


def gateway_values(nlb_idle_timeout_seconds: int | None, scheme: LoadBalancerScheme) -> dict:
    service: dict = {"type": "LoadBalancer"}
    if nlb_idle_timeout_seconds is not None:
        service["annotations"] = nlb_annotations(nlb_idle_timeout_seconds, scheme)
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
    # On EKS: the AWS Load Balancer Controller, which provisions the gateway's NLB (its
    # webhook must be up before the gateway's Service is created).
    load_balancer: pulumi.Resource | None
    nlb_idle_timeout_seconds: int
    # Reachable inside the VPC only unless the stack opts in (`traffic.loadBalancerScheme`).
    load_balancer_scheme: LoadBalancerScheme = "internal"


class Mesh(pulumi.ComponentResource):
    base: k8s.helm.v3.Release
    istiod: k8s.helm.v3.Release
    gateway: k8s.helm.v3.Release

    def __init__(self, name: str, args: MeshArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:mesh:Mesh", name, None, opts)
        # The CNI node agent runs privileged on every node.
        namespace = system_namespace(
            f"{name}-namespace", ISTIO_SYSTEM_NAMESPACE, "mesh", pulumi.ResourceOptions(parent=self), **PRIVILEGED
        )

        def release(
            suffix: str, chart: ChartPin, release_name: str, values: dict, after: list[pulumi.Resource]
        ) -> k8s.helm.v3.Release:
            return helm_release(
                f"{name}-{suffix}",
                release_name,
                ISTIO_SYSTEM_NAMESPACE,
                chart,
                values,
                pulumi.ResourceOptions(parent=self, depends_on=after),
            )

        self.base = release("base", ISTIO_BASE, "istio-base", {}, [namespace])
        cni = release("cni", ISTIO_CNI, "istio-cni", {}, [self.base])
        self.istiod = release("istiod", ISTIOD, "istiod", istiod_values(), [self.base, cni])
        on_aws = args.load_balancer is not None
        self.gateway = release(
            "gateway",
            ISTIO_GATEWAY,
            GATEWAY_SERVICE_ACCOUNT,
            gateway_values(args.nlb_idle_timeout_seconds if on_aws else None, args.load_balancer_scheme),
            [self.istiod, *([args.load_balancer] if args.load_balancer else [])],
        )
        self.register_outputs({"version": ISTIOD.version})
