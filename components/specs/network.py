"""What pods may reach over the network (pure builders): a NetworkPolicy and the peers and ports its
rules name, the outbound policies every restricted namespace gets (a tenant's, the weight
mirror's), and the egress Sidecars and ServiceEntries that hold a tenant's model servers and batch
jobs to the hosts they declare."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from platform_config.models import TenantConfig

from ..constants import (
    BATCH_JOB_COMPONENT,
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
# sidecars' discovery address). Model downloads: HTTPS anywhere but the instance metadata
# service (IPv4 and the Nitro IPv6 address), so no pod reads the node's credentials even where
# the hop limit would let it. The EKS Pod Identity Agent (the weights reader's credentials)
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


def outbound_policies(namespace: str, *, mesh: bool, pickers: bool = False) -> list[dict[str, Any]]:
    """Where pods of `namespace` may connect to: DNS, istiod where they run the mesh's sidecars (`mesh`), the Pod
    Identity Agent and HTTPS outside the instance metadata service, where it runs endpoint pickers (`pickers`)
    theirs within the private address ranges only, nothing else."""
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
    policies += [
        network_policy(
            namespace,
            "allow-pod-identity-egress",
            "Egress",
            [{"to": [{"ipBlock": {"cidr": cidr}} for cidr in POD_IDENTITY_AGENT_CIDRS], "ports": tcp(POD_IDENTITY_AGENT_PORT)}],
        ),
        network_policy(
            namespace,
            "allow-https-egress",
            "Egress",
            [
                {
                    "to": [
                        {"ipBlock": {"cidr": "0.0.0.0/0", "except": [INSTANCE_METADATA_CIDRS[0]]}},
                        {"ipBlock": {"cidr": "::/0", "except": [INSTANCE_METADATA_CIDRS[1]]}},
                    ],
                    "ports": tcp(HTTPS_PORT),
                }
            ],
            NOT_PICKER_PODS if pickers else None,
        ),
    ]
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


# Where a tenant's model servers and batch jobs may connect outside the cluster, by host (Istio
# 1.30.3): their sidecar's outbound traffic policy is REGISTRY_ONLY (a connection to a host no Service or
# ServiceEntry it sees names is dropped, not passed through), it sees its own namespace's only
# (egress hosts `./*`: not a ServiceEntry another namespace exports to all), and ServiceEntries
# exported to the namespace alone name what the servers and jobs read and write: their buckets, virtual-hosted on S3's
# regional and global endpoints (the SDKs' style for a bucket name without dots; a dotted one is
# reached path-style, whose hosts serve every bucket), and Hugging Face's API and download hosts
# (huggingface.co, its CDN's *.huggingface.co and *.hf.co, the Xet storage hosts included). TLS on
# 443, resolved by the sidecar itself (DNS for exact hosts, DYNAMIC_DNS for wildcards, which
# pkg/config/validation/validation.go lines 3072-3106 allows for TLS only with wildcard hosts): it
# connects where the host it matched resolves, never where the caller pointed it. This keeps a
# server from reaching what it was not declared to; it is no barrier to code inside it that brings
# its own credentials (a bucket of another account on the same S3 endpoint). The endpoint pickers
# keep ALLOW_ANY: they read the servers' metrics by pod address, which REGISTRY_ONLY would drop.
# The L3 policy stays HTTPS anywhere but the instance metadata service, for the sidecars' own
# connections. The batch pods run the sidecar natively (batch_job.pod_annotations).
# The Sidecar that limits each kind of a tenant's pods that calls out: its model servers and its batch jobs.
EGRESS_SIDECARS = {MODEL_SERVER_COMPONENT: "model-servers-egress", BATCH_JOB_COMPONENT: "batch-jobs-egress"}
HUGGING_FACE_HOSTS = ("huggingface.co",)
HUGGING_FACE_DOWNLOAD_HOSTS = ("*.huggingface.co", "*.hf.co")


def s3_hosts(buckets: Sequence[str], region: str) -> list[str]:
    """The hosts S3 answers the buckets on in `region`: virtual-hosted per bucket, and path style where a
    bucket's name has dots (its virtual host would not match S3's certificate)."""
    hosts = [host for bucket in buckets for host in (f"{bucket}.s3.{region}.amazonaws.com", f"{bucket}.s3.amazonaws.com")]
    return hosts + ([f"s3.{region}.amazonaws.com", "s3.amazonaws.com"] if any("." in b for b in buckets) else [])


def egress_sidecar(tenant: TenantConfig, component: str) -> dict[str, Any]:
    """The sidecar of the namespace's pods of `component` (EGRESS_SIDECARS): outbound only to what its
    namespace's registry names."""
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
            "egress": [{"hosts": ["./*"]}],
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
