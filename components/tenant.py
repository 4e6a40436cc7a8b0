"""A tenant: its namespace, GPU quotas by priority class, defaults, network isolation, RBAC, its own token, and its
request metrics by tier."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pulumi

from platform_config.models import TrafficConfig
from platform_config.tenant_plan import TenantPlan

from .constants import BATCH_JOB_COMPONENT, MODEL_SERVER_COMPONENT, PACKAGE
from .egress_gateway import resolved_routes, routed
from .k8s_objects import KubernetesObject, custom_resource
from .serving import TenantEgress
from .specs import egress_gateway, network, telemetry, tenancy
from .specs.pod_parts import HF_TOKEN_SECRET, token_secret


@dataclass(frozen=True)
class TenantArgs:
    # The tenant and its budgets by priority class (Plan.tenants), which its quotas state.
    plan: TenantPlan
    # Platform components in the data path of its models' servers, which its isolation lets in:
    # (NetworkPolicy name, namespace) pairs from its models' serving backends.
    ingress: tuple[tuple[str, str], ...] = ()
    # The tenant's own Hugging Face token, made into the namespace's Secret when its servers
    # read it (models from Hugging Face).
    hugging_face_token: pulumi.Output[str] | None = None
    # The mesh's CRDs must exist before the tenant's mesh policies.
    mesh: pulumi.Resource | None = None
    # The header the gateway filter sets to the caller's verified tier (`traffic.tierHeader`):
    # the tier dimension of the namespace's request metrics.
    tier_header: str = TrafficConfig.model_fields["tier_header"].default
    # Where its model servers connect outside the cluster (Plan.egress), and the region their S3
    # endpoints are in (None without EKS, where nothing reads S3).
    egress: TenantEgress = TenantEgress()
    region: pulumi.Input[str] | None = None
    # The hosts of those it reaches by exact name (network.exact_hosts), through the egress gateway, and what of the
    # gateway its pods wait for (EgressGateway.ready_for).
    external_hosts: tuple[network.ExternalHost, ...] = ()
    egress_gateway: tuple[pulumi.Resource, ...] = ()


class Tenant(pulumi.ComponentResource):
    # Declared for the type checker only: pulumi evaluates a resource class's annotations at each registration
    # (pulumi 3.272.0 _types.resource_types, uncached), importing what they name.
    if TYPE_CHECKING:
        namespace: pulumi.Output[str]
        # The Namespace object: what any object of the tenant's needs first.
        namespace_object: KubernetesObject
        # What must be in place before a pod of the tenant's starts: its quotas and default limits
        # (admission), the deny-by-default ingress NetworkPolicy and the mesh's STRICT mTLS and
        # authorization (no window in which a pod is exposed), its egress policies (the deny and
        # what a starting server needs: DNS, istiod, its weights' download), its token Secret. The
        # ingress allow-policies only open traffic up, so pods need not wait for them (until they
        # exist, traffic to a new pod is refused, never let through; and when a whole tenant is
        # destroyed they may go before its pods finish draining). Pod-making objects depend on
        # these, not on the whole component (which would make every object wait on all of them).
        workload_prerequisites: tuple[pulumi.Resource, ...]

    def __init__(self, name: str, args: TenantArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:tenant:Tenant", name, None, opts)
        tenant = args.plan.tenant
        ns = KubernetesObject(name, tenancy.namespace(tenant), pulumi.ResourceOptions(parent=self))
        # Everything else lives in the namespace: create it first.
        inside = pulumi.ResourceOptions(parent=self, depends_on=[ns])
        prerequisites: list[pulumi.Resource] = []
        for quota in tenancy.resource_quotas(args.plan):
            prerequisites.append(KubernetesObject(quota["metadata"]["name"], quota, inside))
        limits = tenancy.limit_range(tenant)
        prerequisites.append(KubernetesObject(limits["metadata"]["name"], limits, inside))
        for policy in tenancy.network_policies(tenant, args.ingress, hugging_face=args.egress.hugging_face):
            network_policy = KubernetesObject(f"{name}-{policy['metadata']['name']}", policy, inside)
            if policy["metadata"]["name"] == tenancy.DEFAULT_DENY_POLICY or "Egress" in policy["spec"]["policyTypes"]:
                prerequisites.append(network_policy)
        if args.hugging_face_token is not None:
            secret = token_secret(HF_TOKEN_SECRET, tenant.name, args.hugging_face_token)
            prerequisites.append(KubernetesObject(f"{name}-huggingface-token", secret, inside))
        mesh_opts = pulumi.ResourceOptions(parent=self, depends_on=[ns, *([args.mesh] if args.mesh else [])])
        prerequisites.append(custom_resource(f"{name}-peer-authentication", tenancy.peer_authentication(tenant), mesh_opts))
        prerequisites.append(
            custom_resource(f"{name}-authorization-policy", tenancy.authorization_policy(tenant, args.ingress), mesh_opts)
        )
        prerequisites += self._egress(name, args, mesh_opts)
        # Request metrics by tier as well as by workload and version (not a prerequisite of pods).
        custom_resource(f"{name}-tier-metrics", telemetry.tier_metrics(tenant.name, args.tier_header), mesh_opts)
        role = tenancy.role(tenant)
        tenant_role = KubernetesObject(role["metadata"]["name"], role, inside)
        binding = tenancy.role_binding(tenant)
        if binding is not None:
            KubernetesObject(binding["metadata"]["name"], binding, pulumi.ResourceOptions(parent=self, depends_on=[tenant_role]))
        self.namespace = ns.metadata.apply(lambda metadata: metadata["name"])
        self.namespace_object = ns
        self.workload_prerequisites = (ns, *prerequisites)
        self.register_outputs({"namespace": self.namespace, "quota": tenant.quota.model_dump(by_alias=True)})

    def _egress(self, name: str, args: TenantArgs, mesh_opts: pulumi.ResourceOptions) -> list[pulumi.Resource]:
        """Its model servers and batch jobs reach outside the cluster only what they read and write: their Sidecars,
        the ServiceEntries naming what they reach, and the routes of those of exact name through the egress gateway,
        which must be up before a pod reads them."""
        tenant = args.plan.tenant
        prerequisites: list[pulumi.Resource] = [
            custom_resource(f"{name}-egress", network.egress_sidecar(tenant, MODEL_SERVER_COMPONENT), mesh_opts)
        ]
        if args.egress.batch_jobs:
            prerequisites.append(
                custom_resource(f"{name}-batch-egress", network.egress_sidecar(tenant, BATCH_JOB_COMPONENT), mesh_opts)
            )
        if args.egress.buckets and args.region is not None:
            buckets = args.egress.buckets
            hosts = pulumi.Output.from_input(args.region).apply(lambda region: network.s3_hosts(buckets, region))
            s3 = network.external_service(tenant.name, "s3", hosts)
            prerequisites.append(custom_resource(f"{name}-egress-s3", s3, mesh_opts))
        if args.egress.hugging_face:
            hugging_face = network.external_service(tenant.name, "hugging-face", list(network.HUGGING_FACE_HOSTS))
            prerequisites.append(custom_resource(f"{name}-egress-hugging-face", hugging_face, mesh_opts))
            downloads = network.external_service(
                tenant.name, "hugging-face-downloads", list(network.HUGGING_FACE_DOWNLOAD_HOSTS), wildcards=True
            )
            prerequisites.append(custom_resource(f"{name}-egress-hugging-face-downloads", downloads, mesh_opts))
        if args.external_hosts:
            routes = resolved_routes(args.external_hosts, args.region)
            builders = {"egress-routes": egress_gateway.tenant_routes, "egress-subsets": egress_gateway.tenant_gateway_subsets}
            for suffix, build in builders.items():
                manifest = routed(functools.partial(build, tenant.name), routes)
                prerequisites.append(custom_resource(f"{name}-{suffix}", manifest, mesh_opts))
            prerequisites.extend(args.egress_gateway)
        return prerequisites
