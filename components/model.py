"""A served model: one ModelServer per running version (stable, and canary while one is
active), the Service that fronts all its versions, and read access to S3 weights."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi

from platform_config.models import ModelConfig, PlatformConfig
from platform_config.serving import running_versions, weights_service_account

from .constants import HTTP_PORT_NAME, LABEL_MODEL, PACKAGE, VLLM_PORT, standard_labels
from .k8s_objects import KubernetesObject
from .model_route import ModelRoute, ModelRouteArgs
from .model_server import ModelServer, ModelServerArgs
from .specs.model_server import plan_server
from .workload_identity import WorkloadAccess, WorkloadIdentity, WorkloadIdentityArgs


def s3_read_policy(uris: list[str]) -> str:
    statements: list[dict[str, Any]] = []
    for uri in uris:
        bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        statements.append(
            {
                "Effect": "Allow",
                "Action": ["s3:GetObject"],
                "Resource": f"arn:aws:s3:::{bucket}/{prefix.rstrip('/')}/*".replace("//*", "/*"),
            }
        )
        statements.append(
            {
                "Effect": "Allow",
                "Action": ["s3:ListBucket"],
                "Resource": f"arn:aws:s3:::{bucket}",
                "Condition": {"StringLike": {"s3:prefix": [f"{prefix.rstrip('/')}/*" if prefix else "*"]}},
            }
        )
    return json.dumps({"Version": "2012-10-17", "Statement": statements})


def model_service(model: ModelConfig) -> dict:
    """Fronts every version of the model; Istio's DestinationRule subsets pick versions."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": model.name,
            "namespace": model.tenant,
            "labels": standard_labels(model.name, "model", **{LABEL_MODEL: model.name}),
        },
        "spec": {
            "type": "ClusterIP",
            "selector": {LABEL_MODEL: model.name},
            "ports": [
                {
                    "name": HTTP_PORT_NAME,
                    "port": VLLM_PORT,
                    "targetPort": HTTP_PORT_NAME,
                    "protocol": "TCP",
                    "appProtocol": "http",
                }
            ],
        },
    }


@dataclass(frozen=True)
class ModelArgs:
    config: PlatformConfig
    model: ModelConfig
    hugging_face_token: bool
    # How pods get AWS roles (S3 weights); None without EKS.
    access: WorkloadAccess | None = None
    # What every object of the model's needs first: its namespace.
    depends_on: tuple[pulumi.Resource, ...] = ()
    # What its pods need besides: sidecar injection, Knative, the tenant's quotas, limits and
    # isolation.
    pod_depends_on: tuple[pulumi.Resource, ...] = ()
    # The Prometheus Operator (its monitor CRDs) and prometheus-adapter (the HPA's metrics).
    monitoring: pulumi.Resource | None = None
    metrics_adapter: pulumi.Resource | None = None
    # The gateway and the mesh: routes are useless before them.
    route_depends_on: tuple[pulumi.Resource, ...] = ()


class Model(pulumi.ComponentResource):
    def __init__(self, name: str, args: ModelArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:model:Model", name, None, opts)
        config, model = args.config, args.model
        pod_depends = list(args.pod_depends_on)
        plans = [
            plan_server(config, model, version, hugging_face_token=args.hugging_face_token) for version in running_versions(model)
        ]

        s3_uris = sorted({p.version.source.s3_uri for p in plans if p.version.source.s3_uri})
        if s3_uris:
            assert args.access is not None  # checks.py requires EKS for S3 weights
            account = weights_service_account(model)
            identity = WorkloadIdentity(
                f"{name}-weights-identity",
                WorkloadIdentityArgs(args.access, model.tenant, account, s3_read_policy(s3_uris)),
                opts=pulumi.ResourceOptions(parent=self),
            )
            # With EKS Pod Identity, credentials are injected at pod admission only if the
            # association already exists: pods wait for the whole identity, not just the account.
            pod_depends.append(identity)
            pod_depends.append(
                KubernetesObject(
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
            )

        self.servers = [
            ModelServer(
                plan.name,
                ModelServerArgs(
                    plan=plan,
                    depends_on=args.depends_on,
                    pod_depends_on=tuple(pod_depends),
                    monitoring=args.monitoring,
                    metrics_adapter=args.metrics_adapter,
                ),
                opts=pulumi.ResourceOptions(parent=self),
            )
            for plan in plans
        ]
        # Routes wait for what they send traffic to: each version rolled out, and the model's Service.
        endpoints: list[pulumi.Resource] = [obj for server in self.servers for obj in server.serving_objects]
        if model.autoscaling.mode == "hpa":
            model_service_object = KubernetesObject(
                f"{name}-service", model_service(model), pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
            )
            endpoints.append(model_service_object)
        ModelRoute(
            f"{name}-route",
            ModelRouteArgs(config=config, model=model, depends_on=(*args.route_depends_on, *endpoints)),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.plans = plans
        self.register_outputs(
            {
                "model": model.name,
                "servedModelName": model.openai_name,
                "tenant": model.tenant,
                "versions": [p.version.name for p in plans],
            }
        )
