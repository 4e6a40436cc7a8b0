"""What pods may reach over the network (pure builders): a NetworkPolicy and the peers and ports its
rules name, the outbound policies every restricted namespace gets (a tenant's, the weight
mirror's, the egress gateway's), the egress Sidecars and ServiceEntries that hold a tenant's model
servers and batch jobs to the hosts they declare, and those hosts (`ExternalHost`); the egress
gateway they reach them through is egress_gateway.py's."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from platform_config.models import TenantConfig

from ..constants import (
    BATCH_JOB_COMPONENT,
    EGRESS_GATEWAY_HOST,
    EGRESS_GATEWAY_LISTENER_PORT,
    EGRESS_GATEWAY_NAMESPACE,
    EGRESS_GATEWAY_SELECTOR,
    ENDPOINT_PICKER_COMPONENT,
    ISTIO_SYSTEM_NAMESPACE,
    KUBE_SYSTEM_NAMESPACE,
    LABEL_COMPONENT,
    MODEL_SERVER_COMPONENT,
    standard_labels,
)

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"

# Where a tenant's pods may connect to. DNS: CoreDNS (EKS and kubeadm keep the `k8s-app:
# kube-dns` label on its pods). The mesh: the `app: istiod` pods' xDS and certificate port
# (15012, istio/istio manifests/charts/istio-control/istio-discovery/templates/service.yaml, the
# sidecars' discovery address). Model downloads: HTTPS to the egress gateway's pods (a tenant's),
# or anywhere but the instance metadata service (IPv4 and the Nitro IPv6 address), so no pod reads
# the node's credentials even where the hop limit would let it. The EKS Pod Identity Agent (the weights reader's credentials)
# answers on the node at 169.254.170.23 / fd00:ec2::23 (EKS user guide, pod-id-agent-setup),
# port 80 (the http://169.254.170.23/v1/credentials URI it injects).
DNS_SELECTOR = {"k8s-app": "kube-dns"}
ISTIOD_SELECTOR = {"app": "istiod"}
ISTIOD_XDS_PORT = 15012
HTTPS_PORT = 443
INSTANCE_METADATA_CIDRS = ("169.254.169.254/32", "fd00:ec2::254/128")
POD_IDENTITY_AGENT_CIDRS = ("169.254.170.23/32", "fd00:ec2::23/128")
POD_IDENTITY_AGENT_PORT = 80


def network_policy(
    namespace: str, name: str, kind: str, rules: list[dict[str, Any]] | None, pods: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A NetworkPolicy over the pods of `namespace` that `pods` selects (every one without it) for `kind` (Ingress
    or Egress); no rules: deny all of it."""
    spec: dict[str, Any] = {"podSelector": pods or {}, "policyTypes": [kind]}
    if rules is not None:
        spec[kind.lower()] = rules
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace, "labels": standard_labels(namespace, "network-policy")},
        "spec": spec,
    }


def in_namespace(ns: str, pods: dict[str, str] | None = None) -> dict[str, Any]:
    """A NetworkPolicy peer: the pods of namespace `ns`, those `pods` selects where given."""
    peer: dict[str, Any] = {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: ns}}}
    if pods is not None:
        peer["podSelector"] = {"matchLabels": pods}
    return peer


def tcp(*ports: int) -> list[dict[str, Any]]:
    """A NetworkPolicy rule's TCP ports."""
    return [{"protocol": "TCP", "port": port} for port in ports]


# The endpoint pickers connect to nothing outside the cluster: to the API server (the `kubernetes`
# Service's endpoints: on EKS the control plane's network interfaces in the cluster's VPC, whose
# private endpoint the platform always enables, components/cluster.py; 443 there, 6443 on most
# clusters of one's own) and to their servers (in the namespace). So their HTTPS stays within the
# private address ranges (RFC 1918, the shared 100.64.0.0/10 EKS custom networking may use, IPv6
# unique local addresses; an IPv6 cluster's global addresses are not among them).
PRIVATE_CIDRS = ("10.0.0.0/8", "100.64.0.0/10", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")
API_SERVER_PORTS = (HTTPS_PORT, 6443)
PICKER_PODS = {"matchLabels": {LABEL_COMPONENT: ENDPOINT_PICKER_COMPONENT}}
NOT_PICKER_PODS = {"matchExpressions": [{"key": LABEL_COMPONENT, "operator": "NotIn", "values": [ENDPOINT_PICKER_COMPONENT]}]}
# The pods of a tenant's that download from Hugging Face's CDN (its model servers, their adapter
# fetchers included, and its batch jobs): the only ones of a tenant's that reach HTTPS beyond the
# egress gateway, where it downloads from there (see HUGGING_FACE_DOWNLOAD_HOSTS for why): outside
# production only, where a stack has no weight mirror.
HUGGING_FACE_DOWNLOADERS = {
    "matchExpressions": [{"key": LABEL_COMPONENT, "operator": "In", "values": [MODEL_SERVER_COMPONENT, BATCH_JOB_COMPONENT]}]
}


def outbound_policies(
    namespace: str, *, mesh: bool, pickers: bool = False, through_egress_gateway: bool = False, hugging_face: bool = False
) -> list[dict[str, Any]]:
    """Where pods of `namespace` may connect to: DNS, istiod where they run the mesh's sidecars (`mesh`), the Pod
    Identity Agent, and HTTPS: anywhere but the instance metadata service, or (`through_egress_gateway`, a tenant's)
    only to the egress gateway's pods, and where its servers and batch jobs download from Hugging Face (`hugging_face`)
    theirs anywhere but the instance metadata service too (HUGGING_FACE_DOWNLOADERS). Where it runs endpoint pickers
    (`pickers`) theirs within the private address ranges only; nothing else."""
    policies = [
        network_policy(
            namespace,
            "allow-dns-egress",
            "Egress",
            [{"to": [in_namespace(KUBE_SYSTEM_NAMESPACE, DNS_SELECTOR)], "ports": [{"protocol": "UDP", "port": 53}, *tcp(53)]}],
        ),
    ]
    if mesh:
        policies.append(
            network_policy(
                namespace,
                "allow-mesh-egress",
                "Egress",
                [{"to": [in_namespace(ISTIO_SYSTEM_NAMESPACE, ISTIOD_SELECTOR)], "ports": tcp(ISTIOD_XDS_PORT)}],
            )
        )
    policies.append(
        network_policy(
            namespace,
            "allow-pod-identity-egress",
            "Egress",
            [{"to": [{"ipBlock": {"cidr": cidr}} for cidr in POD_IDENTITY_AGENT_CIDRS], "ports": tcp(POD_IDENTITY_AGENT_PORT)}],
        )
    )
    not_pickers = NOT_PICKER_PODS if pickers else None
    if through_egress_gateway:
        policies.append(
            network_policy(
                namespace,
                "allow-egress-gateway-egress",
                "Egress",
                [
                    {
                        "to": [in_namespace(EGRESS_GATEWAY_NAMESPACE, EGRESS_GATEWAY_SELECTOR)],
                        "ports": tcp(EGRESS_GATEWAY_LISTENER_PORT),
                    }
                ],
                not_pickers,
            )
        )
        if hugging_face:
            policies.append(
                network_policy(namespace, "allow-hugging-face-egress", "Egress", https_anywhere(), HUGGING_FACE_DOWNLOADERS)
            )
    else:
        policies.append(network_policy(namespace, "allow-https-egress", "Egress", https_anywhere(), not_pickers))
    if pickers:
        policies.append(
            network_policy(
                namespace,
                "allow-picker-api-egress",
                "Egress",
                [{"to": [{"ipBlock": {"cidr": cidr}} for cidr in PRIVATE_CIDRS], "ports": tcp(*API_SERVER_PORTS)}],
                PICKER_PODS,
            )
        )
    return policies


def https_anywhere() -> list[dict[str, Any]]:
    """An egress rule: HTTPS to any address but the instance metadata service's."""
    return [
        {
            "to": [
                {"ipBlock": {"cidr": "0.0.0.0/0", "except": [INSTANCE_METADATA_CIDRS[0]]}},
                {"ipBlock": {"cidr": "::/0", "except": [INSTANCE_METADATA_CIDRS[1]]}},
            ],
            "ports": tcp(HTTPS_PORT),
        }
    ]


# Where a tenant's model servers and batch jobs may connect outside the cluster, by host (Istio
# 1.30.3): their sidecar's outbound traffic policy is REGISTRY_ONLY (a connection to a host no Service or
# ServiceEntry it sees names is dropped, not passed through), it sees its own namespace's only
# (egress hosts `./*`: not a ServiceEntry another namespace exports to all) and the egress
# gateway's Service, and ServiceEntries exported to the namespace alone name what the servers and
# jobs read and write: their buckets, virtual-hosted on S3's regional and global endpoints (the
# SDKs' style for a bucket name without dots; a dotted one is reached path-style, whose hosts serve
# every bucket), and Hugging Face's API and download hosts (huggingface.co, its CDN's
# *.huggingface.co and *.hf.co, the Xet storage hosts included). TLS on 443.
#
# The exact hosts (every S3 one, huggingface.co) go through the egress gateway (egress_gateway.py):
# the sidecar wraps the caller's TLS in the mesh's mTLS to it, naming the host as SNI, and the
# gateway lets each tenant's identities through to that tenant's hosts only. The wildcard download
# hosts cannot (istio 1.30.3): a DYNAMIC_DNS ServiceEntry's host is resolved from the connection's
# SNI by the sni_dynamic_forward_proxy network filter, which istiod adds on a sidecar's outbound
# listeners only (pilot/pkg/networking/core/networkfilter.go buildCompleteNetworkFilters: `class
# == ListenerClassSidecarOutbound`), never on a gateway's; and behind the mTLS hop the SNI a
# gateway sees is the one a DestinationRule subset fixes (`tls.sni`), one per subset, not the
# caller's. Istio's own answer for wildcards of many servers is a separate SNI forward proxy beside
# the gateway (istio.io "Egress using Wildcard Hosts", "Wildcard configuration for arbitrary
# domains"). So the sidecar resolves those itself (DYNAMIC_DNS, which
# pkg/config/validation/validation.go lines 3072-3106 allows for TLS only with wildcard hosts),
# connecting where the host it matched resolves, never where the caller pointed it, and the pods
# that download from there (HUGGING_FACE_DOWNLOADERS, in a tenant that does) keep HTTPS anywhere
# but the instance metadata service at L3; every other pod of a tenant's reaches HTTPS only at the
# egress gateway. In production no tenant does: the weight mirror's Jobs, in the platform's own
# namespace, copy every Hugging Face revision a tenant's pods read to S3, where they read it
# (platform_config/weight_mirror.py; the config checks require it, and the pack refuses a tenant's
# Hugging Face hosts and any public address there), so a tenant's pods reach HTTPS only at the
# egress gateway. Outside production a stack without a mirror (a kubeconfig cluster has no S3)
# keeps the download rule above. This keeps a server from reaching what it was not declared to; it is no barrier
# to code inside it that brings its own credentials (a bucket of another account on the same S3
# endpoint). The endpoint pickers keep ALLOW_ANY: they read the servers' metrics by pod address,
# which REGISTRY_ONLY would drop. The batch pods run the sidecar natively
# (batch_job.pod_annotations).
# The Sidecar that limits each kind of a tenant's pods that calls out: its model servers and its batch jobs.
EGRESS_SIDECARS = {MODEL_SERVER_COMPONENT: "model-servers-egress", BATCH_JOB_COMPONENT: "batch-jobs-egress"}
HUGGING_FACE_HOSTS = ("huggingface.co",)
HUGGING_FACE_DOWNLOAD_HOSTS = ("*.huggingface.co", "*.hf.co")
# What a tenant's sidecars see besides their own namespace: the egress gateway's Service.
EGRESS_GATEWAY_SIDECAR_HOST = f"{EGRESS_GATEWAY_NAMESPACE}/{EGRESS_GATEWAY_HOST}"


@dataclass(frozen=True)
class ExternalHost:
    """A host outside the cluster a tenant's workloads reach by its exact name, through the egress gateway: `pattern`
    the host, with `{region}` where S3's region goes, and `key` a DNS label naming its objects (the tenants'
    DestinationRule subsets, the gateway's server port, its VirtualService)."""

    pattern: str

    @property
    def key(self) -> str:
        """The host's words, and a digest of it that keeps two hosts of the same words apart (a.b, a-b)."""
        words = re.sub(r"[^a-z0-9]+", "-", self.pattern.replace(".amazonaws.com", "").replace("{region}", "regional"))
        return f"{words.strip('-')[:44].rstrip('-')}-{hashlib.sha256(self.pattern.encode()).hexdigest()[:8]}"

    def name(self, region: str) -> str:
        return self.pattern.format(region=region)


def s3_host_patterns(buckets: Sequence[str]) -> list[ExternalHost]:
    """The hosts S3 answers the buckets on: virtual-hosted per bucket on the regional and the global endpoint, and
    path style where a bucket's name has dots (its virtual host would not match S3's certificate)."""
    patterns = [p for bucket in buckets for p in (f"{bucket}.s3.{{region}}.amazonaws.com", f"{bucket}.s3.amazonaws.com")]
    patterns += ["s3.{region}.amazonaws.com", "s3.amazonaws.com"] if any("." in b for b in buckets) else []
    return [ExternalHost(pattern) for pattern in patterns]


def s3_hosts(buckets: Sequence[str], region: str) -> list[str]:
    """The hosts S3 answers the buckets on in `region` (s3_host_patterns)."""
    return [host.name(region) for host in s3_host_patterns(buckets)]


def exact_hosts(buckets: Sequence[str], hugging_face: bool) -> tuple[ExternalHost, ...]:
    """What a tenant's workloads reach through the egress gateway: its buckets' S3 hosts (`buckets`: none where
    nothing reads S3) and, where it downloads from Hugging Face, its API host."""
    return (*s3_host_patterns(buckets), *(ExternalHost(h) for h in HUGGING_FACE_HOSTS if hugging_face))


def egress_sidecar(tenant: TenantConfig, component: str) -> dict[str, Any]:
    """The sidecar of the namespace's pods of `component` (EGRESS_SIDECARS): outbound only to what its
    namespace's registry names, and to the egress gateway."""
    return {
        "apiVersion": "networking.istio.io/v1",
        "kind": "Sidecar",
        "metadata": {
            "name": EGRESS_SIDECARS[component],
            "namespace": tenant.name,
            "labels": standard_labels(tenant.name, "egress"),
        },
        "spec": {
            "workloadSelector": {"labels": {LABEL_COMPONENT: component}},
            "egress": [{"hosts": ["./*", EGRESS_GATEWAY_SIDECAR_HOST]}],
            "outboundTrafficPolicy": {"mode": "REGISTRY_ONLY"},
        },
    }


def external_service(namespace: str, name: str, hosts: Any, *, wildcards: bool = False) -> dict[str, Any]:
    """An external destination of the namespace's model servers (`hosts`: a list, or the Output of one; all
    wildcards with `wildcards`, else none)."""
    return {
        "apiVersion": "networking.istio.io/v1",
        "kind": "ServiceEntry",
        "metadata": {"name": name, "namespace": namespace, "labels": standard_labels(namespace, "egress")},
        "spec": {
            "hosts": hosts,
            "exportTo": ["."],
            "location": "MESH_EXTERNAL",
            "ports": [{"number": HTTPS_PORT, "name": "tls", "protocol": "TLS"}],
            "resolution": "DYNAMIC_DNS" if wildcards else "DNS",
        },
    }
