"""The inference-governance policy pack: what CI enforces on every stack of the platform."""

import gc

from inference_governance import resources, stack
from inference_governance.kube import DEFAULT_OVERRIDE_HEADER, PRODUCTION_PRIORITY_CLASS
from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    PolicyPack,
    ResourceValidationPolicy,
    Severity,
    StackValidationPolicy,
)

# The policy SDK turns every resource it is sent into Python objects, once per policy, and keeps
# few of them: with CPython's default thresholds the collector rescans the heap over and over.
gc.set_threshold(50_000, 50, 1_000)

MANDATORY = EnforcementLevel.MANDATORY
ADVISORY = EnforcementLevel.ADVISORY


def schema(**properties) -> PolicyConfigSchema:
    return PolicyConfigSchema(properties=properties)


PolicyPack(
    name="inference-governance",
    enforcement_level=MANDATORY,
    policies=[
        ResourceValidationPolicy(
            name="gpu-requests-and-limits",
            description="Containers that use a GPU (whole or MIG) set GPU limits and request CPU and memory.",
            validate=resources.gpu_requests_and_limits,
            severity=Severity.HIGH,
        ),
        StackValidationPolicy(
            name="latency-sensitive-not-time-sliced",
            description="Latency-sensitive workloads do not run on time-sliced GPU pools.",
            validate=stack.latency_sensitive_not_time_sliced,
            severity=Severity.HIGH,
        ),
        ResourceValidationPolicy(
            name="inference-graceful-drain",
            description="Inference pods have a long enough termination grace period and a preStop hook.",
            validate=resources.graceful_drain,
            severity=Severity.HIGH,
            config_schema=schema(minTerminationGracePeriodSeconds={"type": "integer", "default": 300}),
        ),
        StackValidationPolicy(
            name="inference-disruption-budget",
            description="Inference workloads (Deployments, StatefulSets, Knative services) that can run more than one replica "
            "have a PodDisruptionBudget.",
            validate=stack.pdb_for_replicated_inference,
            severity=Severity.HIGH,
        ),
        ResourceValidationPolicy(
            name="hpa-behavior",
            description="HPAs have a valid scale-down behavior, no Resource metric on a GPU, max >= min, and min >= 2 in "
            "production.",
            validate=resources.hpa_behavior,
            severity=Severity.HIGH,
            config_schema=schema(
                minScaleDownStabilizationSeconds={"type": "integer", "default": 300},
                minReplicasInProduction={"type": "integer", "default": 2},
                productionStacks={"type": "array", "items": {"type": "string"}, "default": ["prod", "production"]},
            ),
        ),
        ResourceValidationPolicy(
            name="knative-autoscaling",
            description="Knative services set max-scale and target; latency-sensitive ones keep min-scale >= 1.",
            validate=resources.knative_autoscaling,
            severity=Severity.HIGH,
        ),
        StackValidationPolicy(
            name="canary-routes",
            description="VirtualService weights add up to 100, version-override routes come first, every subset exists.",
            validate=stack.canary_routes,
            severity=Severity.HIGH,
            config_schema=schema(
                overrideHeaders={"type": "array", "items": {"type": "string"}, "default": [DEFAULT_OVERRIDE_HEADER]}
            ),
        ),
        StackValidationPolicy(
            name="gpu-quota-and-priority",
            description="GPU namespaces have quotas on every GPU resource they use; GPU workloads name an existing "
            "PriorityClass; experiments cannot preempt production.",
            validate=stack.gpu_quota_and_priority,
            severity=Severity.HIGH,
            config_schema=schema(
                productionPriorityClass={"type": "string", "default": PRODUCTION_PRIORITY_CLASS},
                externalPriorityClasses={"type": "array", "items": {"type": "string"}, "default": []},
            ),
        ),
        ResourceValidationPolicy(
            name="pinned-images",
            description="Container images are pinned to a tag or digest, never 'latest'.",
            validate=resources.pinned_images,
            severity=Severity.HIGH,
        ),
        ResourceValidationPolicy(
            name="model-server-hardening",
            description="Model servers run as non-root, without privilege escalation or capabilities, host namespaces or "
            "hostPath.",
            validate=resources.model_server_hardening,
            severity=Severity.HIGH,
        ),
        ResourceValidationPolicy(
            name="no-plain-secret-env",
            description="No secret-looking environment variable carries a plain value.",
            validate=resources.no_plain_secret_env,
            severity=Severity.CRITICAL,
        ),
        StackValidationPolicy(
            name="stack-capacity",
            description="Tenant GPU quotas fit the pools' capacity; every GPU resource a workload asks for exists in a pool; "
            "MIG profiles are valid for the pool's GPU.",
            validate=stack.stack_capacity,
            severity=Severity.HIGH,
            config_schema=schema(overcommitRatio={"type": "number", "default": 1.0}),
        ),
        StackValidationPolicy(
            name="model-server-monitoring",
            description="Model servers are scraped by a ServiceMonitor or PodMonitor.",
            validate=stack.model_server_monitoring,
            enforcement_level=ADVISORY,
            severity=Severity.MEDIUM,
        ),
        ResourceValidationPolicy(
            name="gpu-topology-spread",
            description="Replicated GPU Deployments spread over nodes.",
            validate=resources.topology_spread,
            enforcement_level=ADVISORY,
            severity=Severity.LOW,
        ),
        StackValidationPolicy(
            name="latency-sensitive-on-spot",
            description="Latency-sensitive workloads on spot capacity can be interrupted.",
            validate=stack.latency_sensitive_on_spot,
            enforcement_level=ADVISORY,
            severity=Severity.MEDIUM,
        ),
    ],
)
