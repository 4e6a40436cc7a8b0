"""One offline batch job: its workload role (read the input and S3 weights, write the output),
service account, runner ConfigMap, LocalQueue and the Indexed Job Kueue admits shard by shard."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from platform_config.models import pinned_s3_uri

from .constants import BATCH_JOB_COMPONENT, PACKAGE, standard_labels
from .k8s_objects import KubernetesObject, custom_resource
from .shapes import BatchJobPlan
from .specs.batch_job import job, runner_config_map
from .specs.kueue import local_queue
from .specs.s3_access import s3_policy
from .workload_identity import WorkloadAccess, WorkloadIdentity, WorkloadIdentityArgs


def batch_job_policy(plan: BatchJobPlan) -> str:
    """Read the input, S3 weights and an S3 adapter (their own, or the weight mirror's copies of Hugging Face ones);
    read and write under the output prefix (finished chunks are read back when a shard resumes); nothing else."""
    job_config = plan.job
    reads = []
    if job_config.input.s3_uri is not None:
        reads.append(pinned_s3_uri(job_config.input))
    sources = [plan.model_source, *(m.fetched_from for m in (plan.lora.modules if plan.lora is not None else ()))]
    reads += [pinned_s3_uri(source) for source in sources if source.s3_uri is not None]
    return s3_policy([*((uri, ["s3:GetObject"]) for uri in reads), (job_config.output, ["s3:GetObject", "s3:PutObject"])])


@dataclass(frozen=True)
class BatchJobArgs:
    plan: BatchJobPlan
    # How pods get AWS roles; the config checks require EKS for batch jobs.
    access: WorkloadAccess | None
    # The tenant's namespace.
    depends_on: tuple[pulumi.Resource, ...] = ()
    # Kueue (its webhooks and ClusterQueues), istiod (the sidecar's injector) and what every tenant pod waits for
    # (PriorityClasses, quotas).
    pod_depends_on: tuple[pulumi.Resource, ...] = ()


class BatchJob(pulumi.ComponentResource):
    def __init__(self, name: str, args: BatchJobArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:batch-job:BatchJob", name, None, opts)
        plan = args.plan
        inside = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        pod_depends: list[pulumi.Resource] = [*args.pod_depends_on]
        annotations: pulumi.Input[dict[str, str]] = {}
        if args.access is not None:
            identity = WorkloadIdentity(
                f"{name}-identity",
                WorkloadIdentityArgs(
                    args.access, plan.namespace, plan.service_account, batch_job_policy(plan), tenant=plan.namespace
                ),
                opts=pulumi.ResourceOptions(parent=self),
            )
            # Pod Identity injects credentials at pod admission only if the association exists.
            pod_depends.append(identity)
            annotations = identity.service_account_annotations
        account = KubernetesObject(
            f"{name}-service-account",
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {
                    "name": plan.service_account,
                    "namespace": plan.namespace,
                    "labels": standard_labels(plan.service_account, BATCH_JOB_COMPONENT),
                    "annotations": annotations,
                },
                "automountServiceAccountToken": False,
            },
            inside,
        )
        runner = KubernetesObject(f"{name}-runner", runner_config_map(plan), inside)
        queue = custom_resource(
            f"{name}-queue",
            local_queue(plan.job),
            pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, *args.pod_depends_on]),
        )
        KubernetesObject(
            f"{name}-job",
            job(plan),
            pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, *pod_depends, account, runner, queue]),
        )
        self.register_outputs({"shards": plan.shards, "paused": plan.job.paused})
