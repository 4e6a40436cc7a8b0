"""A served model: one ModelServer per running version (stable, and canary while one is
active), what its backend's versions share (the Service that fronts them all), its routes, and
read access to S3 weights."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi

from .constants import PACKAGE, standard_labels
from .dashboards import Dashboard, DashboardArgs
from .k8s_objects import KubernetesObject
from .model_route import ModelRoute, ModelRouteArgs
from .model_server import ModelServer, ModelServerArgs, register
from .shapes import ModelPlan, ServerPlan
from .slo import ModelSlo, ModelSloArgs
from .specs.dashboards import model_dashboard
from .specs.s3_access import s3_policy
from .workload_identity import WorkloadAccess, WorkloadIdentity, WorkloadIdentityArgs


@dataclass(frozen=True)
class ModelArgs:
    plan: ModelPlan
    # How pods get AWS roles (S3 weights); None without EKS.
    access: WorkloadAccess | None = None
    # What every object of the model's needs first: its namespace.
    depends_on: tuple[pulumi.Resource, ...] = ()
    # What its pods need besides: sidecar injection, Knative, the tenant's quotas, limits and
    # isolation.
    pod_depends_on: tuple[pulumi.Resource, ...] = ()
    # The Prometheus Operator (its monitor CRDs), and what the backend's autoscaler reads its
    # metrics from (prometheus-adapter).
    monitoring: pulumi.Resource | None = None
    autoscaler_depends_on: tuple[pulumi.Resource, ...] = ()
    # The InferencePool and InferenceObjective CRDs (when a version has an endpoint picker).
    inference_extension: pulumi.Resource | None = None
    # The mesh's control plane (its CRDs: a picker's mesh rules).
    mesh: pulumi.Resource | None = None
    # The gateway and the mesh: routes are useless before them.
    route_depends_on: tuple[pulumi.Resource, ...] = ()
    # The weight mirror's Jobs by name: a server reading copies waits for theirs (ServerPlan.mirror_jobs).
    mirror_jobs: Mapping[str, pulumi.Resource] = field(default_factory=dict)
    # By server name, the digest of its servingShapes row (components/plan_reports.py serving_shape_digests).
    serving_shapes: Mapping[str, str] = field(default_factory=dict)


class Model(pulumi.ComponentResource):
    def __init__(self, name: str, args: ModelArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:model:Model", name, None, opts)
        plan = args.plan
        model = plan.model
        pod_depends = [*args.pod_depends_on, *self._weights_access(name, args)]
        self.servers = [self._server(server, args, pod_depends) for server in plan.servers]
        self._routes(name, args)
        self._objectives(name, args)
        self.register_outputs(
            {
                "model": model.name,
                "servedModelName": model.openai_name,
                "tenant": model.tenant,
                "versions": [server.version.name for server in plan.servers],
            }
        )

    def _weights_access(self, name: str, args: ModelArgs) -> list[pulumi.Resource]:
        """Where the versions read S3 weights: the workload identity that reads them and its
        service account, which the pods wait for; none otherwise."""
        plan = args.plan
        model = plan.model
        if plan.weights_service_account is None:
            return []
        assert args.access is not None  # checks.py requires EKS for S3 weights
        account = plan.weights_service_account
        identity = WorkloadIdentity(
            f"{name}-weights-identity",
            WorkloadIdentityArgs(
                args.access,
                model.tenant,
                account,
                s3_policy((uri, ["s3:GetObject"]) for uri in plan.s3_uris),
                tenant=model.tenant,
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        # With EKS Pod Identity, credentials are injected at pod admission only if the
        # association already exists: pods wait for the whole identity, not just the account.
        service_account = KubernetesObject(
            f"{name}-weights-service-account",
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {
                    "name": account,
                    "namespace": model.tenant,
                    "labels": standard_labels(account, "model-weights"),
                    "annotations": identity.service_account_annotations,
                },
                "automountServiceAccountToken": False,
            },
            pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        return [identity, service_account]

    def _server(self, server: ServerPlan, args: ModelArgs, pod_depends: list[pulumi.Resource]) -> ModelServer:
        """One version's server; its pods also wait for the weight mirror's Jobs that copy its weights and adapters."""
        return ModelServer(
            server.name,
            ModelServerArgs(
                plan=server,
                depends_on=args.depends_on,
                pod_depends_on=(*pod_depends, *(args.mirror_jobs[job] for job in server.mirror_jobs)),
                monitoring=args.monitoring,
                autoscaler_depends_on=args.autoscaler_depends_on,
                inference_extension=args.inference_extension,
                mesh=args.mesh,
                serving_shape=args.serving_shapes.get(server.name),
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _routes(self, name: str, args: ModelArgs) -> None:
        """The objects the model's versions share, then its routes. Routes wait for what they send
        traffic to: each version rolled out, and what the model's versions share (the model's
        Service)."""
        plan = args.plan
        endpoints: list[pulumi.Resource] = [obj for server in self.servers for obj in server.serving_objects]
        for shared in plan.backend.model_objects(plan):
            endpoints.append(register(name, shared, pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))))
        ModelRoute(
            f"{name}-route",
            ModelRouteArgs(route=plan.route, depends_on=(*args.route_depends_on, *endpoints)),
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _objectives(self, name: str, args: ModelArgs) -> None:
        """The model's SLO rules, and its versions side by side on a dashboard read from the
        series those rules record."""
        plan = args.plan
        ModelSlo(
            f"{name}-slo",
            ModelSloArgs(
                slo=plan.slo, depends_on=(*args.depends_on, *([args.monitoring] if args.monitoring is not None else []))
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        Dashboard(
            f"{name}-dashboard",
            DashboardArgs(namespace=plan.model.tenant, dashboard=model_dashboard(plan.slo), depends_on=args.depends_on),
            opts=pulumi.ResourceOptions(parent=self),
        )
