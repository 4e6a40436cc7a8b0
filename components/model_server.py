"""One version of one model served by vLLM: the objects its serving backend declares (a
Deployment with its HPA, or a Knative Service, and their Service, PDB and monitor), registered
with what each kind of object waits for. Drained gracefully either way."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pulumi

from .constants import PACKAGE
from .k8s_objects import KubernetesObject, custom_resource
from .plan_reports import SERVING_SHAPE_ANNOTATION
from .shapes import ServerObject, ServerPlan
from .specs.chat_template import chat_template_config_map
from .specs.pod import rollout_timeout_seconds


@dataclass(frozen=True)
class ModelServerArgs:
    plan: ServerPlan
    # What every object needs first: the namespace.
    depends_on: tuple[pulumi.Resource, ...] = ()
    # What the pods need besides: sidecar injection, the backend's machinery (Knative), the
    # tenant's quotas, limits and isolation, the weights' service account.
    pod_depends_on: tuple[pulumi.Resource, ...] = ()
    # The Prometheus Operator, whose CRDs the Service/PodMonitor are.
    monitoring: pulumi.Resource | None = None
    # What the backend's autoscaler reads its metrics from (prometheus-adapter).
    autoscaler_depends_on: tuple[pulumi.Resource, ...] = ()
    # The InferencePool and InferenceObjective CRDs, whose instances an endpoint picker reads.
    inference_extension: pulumi.Resource | None = None
    # The mesh's control plane, whose CRDs the picker's mesh rules are.
    mesh: pulumi.Resource | None = None
    # The digest of the server's servingShapes row (components/plan_reports.py), annotated on its vLLM workload.
    serving_shape: str | None = None


def with_serving_shape(obj: ServerObject, digest: str | None) -> ServerObject:
    """The vLLM workload with its serving-shape annotation on its own metadata (not its pods': no pod rolls when only
    the shape's load or replica bounds change); any other object as it is."""
    if not obj.runs_vllm or digest is None:
        return obj
    metadata = obj.manifest["metadata"]
    annotations = {**metadata.get("annotations", {}), SERVING_SHAPE_ANNOTATION: digest}
    return dataclasses.replace(obj, manifest={**obj.manifest, "metadata": {**metadata, "annotations": annotations}})


def register(name: str, obj: ServerObject, opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
    resource_name = f"{name}-{obj.suffix}"
    if obj.ignore_changes:
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(ignore_changes=list(obj.ignore_changes)))
    if obj.custom:
        return custom_resource(resource_name, obj.manifest, opts)
    return KubernetesObject(resource_name, obj.manifest, opts)


class ModelServer(pulumi.ComponentResource):
    # Declared for the type checker only: pulumi evaluates a resource class's annotations at each registration
    # (pulumi 3.272.0 _types.resource_types, uncached), importing what they name.
    if TYPE_CHECKING:
        # What routes wait for before sending traffic here (the rolled-out pods, their Service).
        serving_objects: tuple[pulumi.Resource, ...]

    def __init__(self, name: str, args: ModelServerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:model-server:ModelServer", name, None, opts)
        plan = args.plan
        # A version is ready once its model is loaded, which can outlast Pulumi's default wait.
        rollout = f"{rollout_timeout_seconds(plan)}s"
        options = {
            "plain": pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
            "pods": pulumi.ResourceOptions(
                parent=self,
                depends_on=[*args.depends_on, *args.pod_depends_on],
                custom_timeouts=pulumi.CustomTimeouts(create=rollout, update=rollout),
            ),
            "monitor": pulumi.ResourceOptions(
                parent=self, depends_on=[*args.depends_on, *([args.monitoring] if args.monitoring else [])]
            ),
            "mesh": pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, *([args.mesh] if args.mesh else [])]),
            "inference-pool": pulumi.ResourceOptions(
                parent=self,
                depends_on=[*args.depends_on, *([args.inference_extension] if args.inference_extension else [])],
            ),
        }
        serving: list[pulumi.Resource] = []
        pods: list[pulumi.Resource] = []
        # What the pods mount, whatever the backend: registered first, and waited for by the pods' object.
        pod_config: list[pulumi.Resource] = []
        template = chat_template_config_map(plan)
        if template is not None:
            pod_config.append(register(name, ServerObject("chat-template", template, "plain"), options["plain"]))
            options["pods"] = pulumi.ResourceOptions.merge(options["pods"], pulumi.ResourceOptions(depends_on=pod_config))
        for obj in (with_serving_shape(o, args.serving_shape) for o in plan.backend.server_objects(plan)):
            if obj.role == "autoscaler":
                # It scales the pods' object, with metrics from the backend's machinery.
                opts_for = pulumi.ResourceOptions(parent=self, depends_on=[*pods, *args.autoscaler_depends_on])
            else:
                opts_for = options[obj.role]
            if obj.after_pods:
                opts_for = pulumi.ResourceOptions.merge(opts_for, pulumi.ResourceOptions(depends_on=list(pods)))
            resource = register(name, obj, opts_for)
            if obj.role == "pods":
                pods.append(resource)
            if obj.serves:
                serving.append(resource)
        self.serving_objects = tuple(serving)
        self.register_outputs(
            {
                "name": plan.name,
                "namespace": plan.namespace,
                "mode": plan.backend.mode,
                "version": plan.version.name,
                "profile": plan.profile.name,
                "gpu": {plan.gpu_resource: plan.gpu_count},
                "replicas": {"min": plan.min_replicas, "max": plan.max_replicas},
                "image": plan.image,
            }
        )
