"""The whole platform for one stack: GPU pools and their sharing, tenants, and what serves them.

This is the composition root the program builds; every other component is a child of it and
inherits its Kubernetes provider.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from platform_config import floors
from platform_config.capacity import batch_queue_report, capacity_report
from platform_config.models import PlatformConfig

from .batch_job import BatchJob, BatchJobArgs
from .cluster import Cluster
from .cluster_autoscaler import ClusterAutoscaler, ClusterAutoscalerArgs
from .constants import MONITORING_NAMESPACE, PACKAGE, PROMETHEUS_URL, SYSTEM_NODE_SELECTOR, aws_tags
from .dashboards import Dashboard, DashboardArgs
from .egress_gateway import EgressGateway, EgressGatewayArgs
from .event_loop import turn_after
from .gateway_routing import GatewayRouting, GatewayRoutingArgs
from .gpu_node_pool import GpuNodePool, GpuNodePoolArgs
from .gpu_operator import GpuOperator, GpuOperatorArgs
from .image_prepull import ImagePrePull, ImagePrePullArgs
from .inference_extension import InferenceExtensionCrds
from .knative_serving import KnativeServing, KnativeServingArgs
from .kueue import Kueue, KueueArgs
from .load_balancer_controller import LoadBalancerController, LoadBalancerControllerArgs
from .mesh import Mesh, MeshArgs
from .metrics_server import MetricsServer, MetricsServerArgs
from .model import Model, ModelArgs
from .monitoring import Monitoring
from .pool_plan import PoolPlan
from .priority_classes import PriorityClasses
from .prometheus_adapter import PrometheusAdapter, PrometheusAdapterArgs
from .serving import Plan
from .shapes import MachineryName
from .specs.dashboards import platform_overview_dashboard
from .specs.gateway import stream_idle_timeout_seconds
from .system_nodes import stack_system_template
from .tenant import Tenant, TenantArgs
from .weight_mirror import WeightMirror, WeightMirrorArgs
from .workload_identity import WorkloadAccess


@dataclass(frozen=True)
class InferencePlatformArgs:
    plan: Plan
    cluster: Cluster
    # By server name, the digest of its servingShapes row (plan_reports.serving_shape_digests), which its vLLM
    # workload carries: computed from the rows the program exports, not again.
    serving_shapes: Mapping[str, str]
    # Tenant name -> its own Hugging Face token.
    hugging_face_tokens: Mapping[str, pulumi.Output[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class _EksServices:
    """What the platform adds on an EKS cluster only, which later children use."""

    access: WorkloadAccess
    region: pulumi.Input[str]
    load_balancer: LoadBalancerController
    mirror: WeightMirror | None


@dataclass(frozen=True)
class _ServingMachinery:
    """The serving machinery the stack's backends need: the inference extension's CRDs (None
    without an endpoint picker), and by machinery name what the models' pods and autoscalers
    wait for."""

    crds: InferenceExtensionCrds | None
    pods: dict[MachineryName, list[pulumi.Resource]]
    autoscalers: dict[MachineryName, list[pulumi.Resource]]


class InferencePlatform(pulumi.ComponentResource):
    def __init__(self, name: str, args: InferencePlatformArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:platform:InferencePlatform", name, None, opts)
        plan = args.plan
        config = plan.config
        child = pulumi.ResourceOptions(parent=self)
        tags = aws_tags(config)

        priority_classes = PriorityClasses("priority-classes", opts=child)
        monitoring = (
            Monitoring("monitoring", plan.chart_image_values, opts=child) if config.monitoring.install_prometheus_stack else None
        )
        # Batch jobs queued through Kueue, installed when a tenant has a batch budget or a job exists.
        batch = bool(plan.batch_jobs or plan.batch_queues)
        # What every request depends on runs more than once in production (control-plane-availability).
        control_plane_replicas = floors.control_plane_replicas(config.environment)
        if monitoring is not None:
            self._overview_dashboard(plan, monitoring, batch)
        self.pools = [self._gpu_pool(pool, config, args.cluster, tags) for pool in plan.pools.values()]
        eks = self._eks_services(args, tags, control_plane_replicas) if config.cluster.eks is not None else None
        self._node_agents(plan, monitoring)
        self._image_prepull(plan)
        mesh = self._mesh(plan, eks, control_plane_replicas)
        routing = GatewayRouting(
            "gateway-routing",
            GatewayRoutingArgs(traffic=config.traffic, routes=plan.routes, depends_on=(mesh.istiod, mesh.gateway)),
            opts=child,
        )
        self.tenants = self._tenants(args, mesh, eks, control_plane_replicas)
        machinery = self._serving_machinery(plan, monitoring, mesh, control_plane_replicas)

        self.models = []
        for index, model_plan in enumerate(plan.models):
            turn_after(index)
            model, backend = model_plan.model, model_plan.backend
            tenant = self.tenants[model.tenant]
            self.models.append(
                Model(
                    model.name,
                    ModelArgs(
                        plan=model_plan,
                        access=eks.access if eks else None,
                        depends_on=(tenant.namespace_object,),
                        inference_extension=machinery.crds,
                        mesh=mesh.istiod,
                        pod_depends_on=(
                            mesh.istiod,
                            *priority_classes.classes,
                            *(r for name in sorted(backend.machinery) for r in machinery.pods.get(name, [])),
                            *tenant.workload_prerequisites,
                        ),
                        monitoring=monitoring.release if monitoring is not None else None,
                        autoscaler_depends_on=tuple(
                            r for name in sorted(backend.machinery) for r in machinery.autoscalers.get(name, [])
                        ),
                        route_depends_on=(routing,),
                        mirror_jobs=eks.mirror.jobs if eks and eks.mirror is not None else {},
                        serving_shapes=args.serving_shapes,
                    ),
                    opts=child,
                )
            )
        if batch:
            self._batch(plan, eks, priority_classes, monitoring, mesh, control_plane_replicas)
        self._reports(plan)
        self.register_outputs(
            {
                "gpuCapacity": self.capacity,
                "poolAdvertisedPerNode": self.pool_advertised,
                "nodePools": self.node_pool_templates,
                "serverPeaks": self.server_peaks,
                "batchQueues": self.batch_queues,
            }
        )

    def _overview_dashboard(self, plan: Plan, monitoring: Monitoring, batch: bool) -> None:
        """The platform's overview, next to the Grafana that shows it; a cluster's own Grafana is
        left to its operator."""
        Dashboard(
            "platform-overview",
            DashboardArgs(
                MONITORING_NAMESPACE,
                platform_overview_dashboard(
                    plan.node_prices_per_hour(),
                    batch=batch,
                ),
                depends_on=(monitoring.namespace,),
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _gpu_pool(self, pool: PoolPlan, config: PlatformConfig, cluster: Cluster, tags: dict[str, str]) -> GpuNodePool:
        eks = config.cluster.eks
        return GpuNodePool(
            pool.pool.name,
            GpuNodePoolArgs(
                plan=pool,
                cluster_mode=config.cluster.mode,
                cluster_name=config.cluster.name,
                tags=tags,
                eks_cluster_name=cluster.name if eks else None,
                node_role_arn=cluster.node_role_arn,
                subnet_ids=tuple(cluster.subnet_ids),
                depends_on=tuple(cluster.node_role_dependencies),
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _eks_services(
        self, args: InferencePlatformArgs, tags: dict[str, str], control_plane_replicas: int | None
    ) -> _EksServices:
        """On EKS: the workload identities' access, the load balancer controller, the cluster
        autoscaler and, where the stack has one, the weight mirror."""
        config = args.plan.config
        cluster = args.cluster
        eks = config.cluster.eks
        assert eks is not None
        child = pulumi.ResourceOptions(parent=self)
        assert cluster.vpc_id is not None  # set whenever the cluster is EKS
        access = WorkloadAccess(cluster.name, eks.workload_identity, tags, cluster.oidc_provider_arn, cluster.oidc_issuer)
        region = eks.region or aws.get_region_output().region
        load_balancer = LoadBalancerController(
            "load-balancer-controller",
            LoadBalancerControllerArgs(
                cluster_name=config.cluster.name,
                region=region,
                vpc_id=cluster.vpc_id,
                access=access,
                chart_image_values=args.plan.chart_image_values,
            ),
            opts=child,
        )
        ClusterAutoscaler(
            "cluster-autoscaler",
            ClusterAutoscalerArgs(
                cluster_name=config.cluster.name,
                kubernetes_version=config.cluster.kubernetes_version,
                region=region,
                access=access,
                max_node_provision_seconds=args.plan.max_node_provision_seconds,
                replicas=control_plane_replicas or 1,
                spread=control_plane_replicas is not None,
                chart_image_values=args.plan.chart_image_values,
            ),
            opts=child,
        )
        mirror = None
        # Hugging Face revisions copied to S3 once, for the tenants' pods that read them (checks: EKS only).
        if config.weight_mirror is not None:
            mirror = WeightMirror(
                "weight-mirror",
                WeightMirrorArgs(
                    mirror=config.weight_mirror,
                    revisions=args.plan.mirrored_revisions,
                    access=access,
                    region=region,
                    vpc_id=cluster.vpc_id,
                    tags=tags,
                    hugging_face_tokens=args.hugging_face_tokens,
                ),
                opts=child,
            )
        return _EksServices(access, region, load_balancer, mirror)

    def _node_agents(self, plan: Plan, monitoring: Monitoring | None) -> None:
        """metrics-server where the stack installs it, and the GPU operator."""
        config = plan.config
        child = pulumi.ResourceOptions(parent=self)
        if config.monitoring.install_metrics_server:
            node_selector = SYSTEM_NODE_SELECTOR if config.cluster.eks else None
            MetricsServer(
                "metrics-server",
                MetricsServerArgs(node_selector=node_selector, chart_image_values=plan.chart_image_values),
                opts=child,
            )
        GpuOperator(
            "gpu-operator",
            GpuOperatorArgs(
                pools=tuple(plan.pools.values()),
                monitoring=monitoring and monitoring.release,
                chart_image_values=plan.chart_image_values,
            ),
            opts=child,
        )

    def _image_prepull(self, plan: Plan) -> None:
        """The servers' images on every node of the pools that run them, before a replica needs them."""
        images_by_pool = {
            pool.name: tuple(sorted({s.image for m in plan.models for s in m.servers if s.pool.name == pool.name}))
            for pool in plan.config.node_pools
        }
        ImagePrePull(
            "image-prepull",
            ImagePrePullArgs(tuple((pool, images) for pool, images in images_by_pool.items() if images)),
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _mesh(self, plan: Plan, eks: _EksServices | None, control_plane_replicas: int | None) -> Mesh:
        config = plan.config
        return Mesh(
            "mesh",
            MeshArgs(
                load_balancer=eks.load_balancer.release if eks else None,
                # The NLB's listeners keep an idle connection past the gateway's own stream idle
                # timeout, so the gateway, not the NLB, decides when a silent answer is too late.
                nlb_idle_timeout_seconds=stream_idle_timeout_seconds(config.traffic) + 60,
                load_balancer_scheme=config.traffic.load_balancer_scheme,
                control_plane_replicas=control_plane_replicas or 1,
                spread_control_plane=control_plane_replicas is not None,
                chart_image_values=plan.chart_image_values,
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _tenants(
        self, args: InferencePlatformArgs, mesh: Mesh, eks: _EksServices | None, control_plane_replicas: int | None
    ) -> dict[str, Tenant]:
        """Each tenant's namespace, quotas and isolation, letting in the platform components in
        its models' data path, and the egress gateway they reach out through."""
        egress = EgressGateway(
            "egress-gateway",
            EgressGatewayArgs(
                egress=args.plan.egress,
                region=eks.region if eks else None,
                istiod=mesh.istiod,
                mesh_crds=mesh.base,
                replicas=control_plane_replicas or 1,
                spread=control_plane_replicas is not None,
                node_selector=SYSTEM_NODE_SELECTOR if eks else None,
                chart_image_values=args.plan.chart_image_values,
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        plan = args.plan
        config = plan.config
        # What each tenant lets in for its models' backends (Knative's activator, for one).
        ingress: dict[str, set[tuple[str, str]]] = {t.name: set() for t in config.tenants}
        for model_plan in plan.models:
            ingress[model_plan.model.tenant].update(model_plan.backend.tenant_ingress())
        hf_tenants = plan.hugging_face_token_tenants()
        return {
            tenant.name: Tenant(
                tenant.name,
                TenantArgs(
                    plan=plan.tenants[tenant.name],
                    ingress=tuple(sorted(ingress[tenant.name])),
                    hugging_face_token=args.hugging_face_tokens[tenant.name] if tenant.name in hf_tenants else None,
                    mesh=mesh.base,
                    tier_header=config.traffic.tier_header,
                    egress=plan.egress[tenant.name],
                    region=eks.region if eks else None,
                    external_hosts=egress.hosts[tenant.name],
                    egress_gateway=egress.ready_for(tenant.name),
                ),
                opts=pulumi.ResourceOptions(parent=self),
            )
            for tenant in config.tenants
        }

    def _serving_machinery(
        self, plan: Plan, monitoring: Monitoring | None, mesh: Mesh, control_plane_replicas: int | None
    ) -> _ServingMachinery:
        """Serving machinery, installed only when a backend in use needs it: what its models' pods
        wait for (Knative before a Knative Service), and what their autoscalers read metrics
        from (prometheus-adapter). Sidecar injection and the PriorityClasses come first always."""
        config = plan.config
        child = pulumi.ResourceOptions(parent=self)
        needed = {name for backend in plan.backends() for name in backend.machinery}
        pod_machinery: dict[MachineryName, list[pulumi.Resource]] = {}
        autoscaler_machinery: dict[MachineryName, list[pulumi.Resource]] = {}
        # The InferencePool and objective CRDs, when any version has an endpoint picker: before
        # the pickers' objects, and before prometheus-adapter, which maps its queue metric to them.
        crds = (
            InferenceExtensionCrds("inference-extension", opts=child)
            if any(server.endpoint_picker for m in plan.models for server in m.servers)
            else None
        )
        if "metrics-adapter" in needed:
            adapter = PrometheusAdapter(
                "prometheus-adapter",
                PrometheusAdapterArgs(
                    prometheus_url=config.monitoring.prometheus_url or PROMETHEUS_URL,
                    depends_on=(monitoring.release,) if monitoring else (),
                    inference_extension_crds=crds,
                    chart_image_values=plan.chart_image_values,
                ),
                opts=child,
            )
            autoscaler_machinery["metrics-adapter"] = [adapter.release]
        if "knative" in needed:
            knative = KnativeServing(
                "knative-serving",
                KnativeServingArgs(
                    depends_on=(mesh.istiod,),
                    high_availability=control_plane_replicas,
                    chart_image_values=plan.chart_image_values,
                ),
                opts=child,
            )
            pod_machinery["knative"] = [knative.serving]
        return _ServingMachinery(crds, pod_machinery, autoscaler_machinery)

    def _batch(
        self,
        plan: Plan,
        eks: _EksServices | None,
        priority_classes: PriorityClasses,
        monitoring: Monitoring | None,
        mesh: Mesh,
        control_plane_replicas: int | None,
    ) -> None:
        """Kueue with the tenants' batch queues, and each batch job queued through it."""
        config = plan.config
        child = pulumi.ResourceOptions(parent=self)
        kueue = Kueue(
            "kueue",
            KueueArgs(
                queues=plan.batch_queues,
                pools=tuple(p for p in config.node_pools if p.name in {q.pool for q in plan.batch_queues}),
                jobs=plan.batch_jobs,
                system_node_selector=SYSTEM_NODE_SELECTOR if config.cluster.eks else None,
                spread=control_plane_replicas is not None,
                monitoring=monitoring.release if monitoring is not None else None,
                namespaces={name: tenant.namespace_object for name, tenant in self.tenants.items()},
                chart_image_values=plan.chart_image_values,
            ),
            opts=child,
        )
        mirror_jobs = eks.mirror.jobs if eks and eks.mirror is not None else {}
        for job_plan in plan.batch_jobs:
            tenant = self.tenants[job_plan.namespace]
            # istiod too: its injector adds the pods' sidecar, and Fails them while it cannot answer; and the weight
            # mirror's Jobs that copy what its pods read.
            waits = (*kueue.ready, *priority_classes.classes, *tenant.workload_prerequisites, mesh.istiod)
            BatchJob(
                job_plan.name,
                BatchJobArgs(
                    plan=job_plan,
                    access=eks.access if eks else None,
                    depends_on=(tenant.namespace_object,),
                    pod_depends_on=(*waits, *(mirror_jobs[name] for name in job_plan.mirror_jobs)),
                ),
                opts=child,
            )

    def _reports(self, plan: Plan) -> None:
        """What the stack exports: GPU capacity, the pools as the scheduler sees them, each
        server's peak pods and the batch queues."""
        self.batch_queues = batch_queue_report(plan.batch_queues)
        self.capacity = capacity_report(plan.config, plan.endpoint_pickers_by_tenant)
        self.pool_advertised = {pool.pool_name: pool.advertised for pool in self.pools}
        self.node_pool_templates = [pool.scheduling_template for pool in self.pools]
        system = stack_system_template(plan.config)
        if system is not None:
            self.node_pool_templates.append(system)
        # Pods of each version's server at its model's peak (the preview's admission stage
        # holds them to the quotas and pools, as the config checks do).
        self.server_peaks = [
            {"namespace": server.namespace, "name": server.name, "peakPods": m.peak.pods[server.version.name]}
            for m in plan.models
            for server in m.servers
        ]
