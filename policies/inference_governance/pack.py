"""The pack's policies: each rule's name, description, level, severity, config schema (with its defaults) and
validator, as the policy SDK declares them. `policies/__main__.py` serves them as the pack; tests call the validators
through them directly (tests/policy_harness.py), as the SDK's analyzer would."""

from pulumi_policy import EnforcementLevel, PolicyConfigSchema, ResourceValidationPolicy, Severity, StackValidationPolicy

from inference_governance import (
    adapters,
    autoscaling,
    canary,
    canary_routes,
    control_plane,
    credentials,
    disruption,
    endpoint_pickers,
    gateway_auth,
    gpu_placement,
    gpu_quotas,
    images,
    kueue,
    latency,
    monitoring,
    pod_security,
    serving_performance,
    shell_scripts,
    tenant_egress,
    tenant_s3,
)
from inference_governance.kube import (
    DEFAULT_OVERRIDE_HEADER,
    DEFAULT_TIER_HEADER,
    FACTS,
    FLOORS,
    FORBIDDEN_TAGS,
    PINNED_REPOSITORIES,
    PRODUCTION_PRIORITY_CLASS,
    PRODUCTION_STACKS,
)

MANDATORY = EnforcementLevel.MANDATORY
ADVISORY = EnforcementLevel.ADVISORY

NAME = "inference-governance"
# The level of every policy that does not declare its own.
ENFORCEMENT_LEVEL = MANDATORY


def schema(**properties) -> PolicyConfigSchema:
    return PolicyConfigSchema(properties=properties)


STRINGS = {"type": "array", "items": {"type": "string"}}
PRODUCTION = {**STRINGS, "default": PRODUCTION_STACKS}
# Which tiers make a model latency-sensitive, and the header routes match them on.
LATENCY_TIERS = {
    "latencySensitiveTiers": {**STRINGS, "default": ["premium"]},
    "tierHeader": {"type": "string", "default": DEFAULT_TIER_HEADER},
}


POLICIES = [
    ResourceValidationPolicy(
        name="gpu-requests-and-limits",
        description="Containers that use a GPU (whole or MIG) set GPU limits and request CPU and memory.",
        validate=gpu_placement.gpu_requests_and_limits,
        severity=Severity.HIGH,
    ),
    StackValidationPolicy(
        name="latency-sensitive-not-time-sliced",
        description="Latency-sensitive workloads (by label, or by serving a latency-sensitive tier) do not run on "
        "time-sliced GPU pools.",
        validate=latency.latency_sensitive_not_time_sliced,
        severity=Severity.HIGH,
        config_schema=schema(**LATENCY_TIERS),
    ),
    StackValidationPolicy(
        name="latency-sensitive-min-scale",
        description="Latency-sensitive Knative services (by label, or by serving a latency-sensitive tier) keep min-scale >= 1.",
        validate=latency.latency_sensitive_min_scale,
        severity=Severity.HIGH,
        config_schema=schema(**LATENCY_TIERS),
    ),
    ResourceValidationPolicy(
        name="gpu-less-pods-see-no-gpu",
        description="A pod that may run on a GPU node (it tolerates the GPU taint) but asks for no GPU sets "
        "NVIDIA_VISIBLE_DEVICES=void in every container, so the node's GPUs stay with the pods the device plugin "
        "gave them to.",
        validate=gpu_placement.gpu_less_pods_see_no_gpu,
        severity=Severity.HIGH,
    ),
    StackValidationPolicy(
        name="gpu-pod-placement",
        description="GPU workloads name their pool (nodeSelector or required node affinity), and it is a GPU pool.",
        validate=gpu_placement.gpu_pod_placement,
        severity=Severity.HIGH,
    ),
    ResourceValidationPolicy(
        name="inference-graceful-drain",
        description="Inference pods have a long enough termination grace period and a preStop hook long enough to leave "
        "the load balancers, which with vLLM's --shutdown-timeout fits in the grace period.",
        validate=disruption.graceful_drain,
        severity=Severity.HIGH,
        config_schema=schema(
            minTerminationGracePeriodSeconds={"type": "integer", "default": FLOORS["minTerminationGracePeriodSeconds"]},
            minPreStopSeconds={"type": "integer", "default": FLOORS["minPreStopSeconds"]},
        ),
    ),
    StackValidationPolicy(
        name="inference-disruption-budget",
        description="Inference workloads (Deployments, StatefulSets, Knative services) that can run more than one replica "
        "have a PodDisruptionBudget that allows an eviction.",
        validate=disruption.pdb_for_replicated_inference,
        severity=Severity.HIGH,
    ),
    ResourceValidationPolicy(
        name="hpa-behavior",
        description="HPAs are autoscaling/v2 with a valid, slow enough scale-down behavior, no Resource metric on a GPU, "
        "max >= min, and min >= 2 in production.",
        validate=autoscaling.hpa_behavior,
        severity=Severity.HIGH,
        config_schema=schema(
            minScaleDownStabilizationSeconds={"type": "integer", "default": FLOORS["minScaleDownStabilizationSeconds"]},
            maxScaleDownPercentPerMinute={"type": "number", "default": FLOORS["maxScaleDownPercentPerMinute"]},
            minReplicasInProduction={"type": "integer", "default": FLOORS["minReplicasInProduction"]},
            productionStacks=PRODUCTION,
        ),
    ),
    ResourceValidationPolicy(
        name="knative-autoscaling",
        description="Knative services set max-scale and target, target-burst-capacity 0 (Knative's activator, "
        "whose queue has no bound, leaves the path once a replica is ready) and containerConcurrency 0 (queue-proxy's "
        "queue has no time bound); in production a scale-down delay and window of at least a minute (and an endpoint "
        "picker in front: endpoint-picker-availability).",
        validate=autoscaling.knative_autoscaling,
        severity=Severity.HIGH,
        config_schema=schema(
            minScaleDownDelaySeconds={"type": "integer", "default": FLOORS["minScaleDownDelaySeconds"]},
            minWindowSeconds={"type": "integer", "default": FLOORS["minWindowSeconds"]},
            productionStacks=PRODUCTION,
        ),
    ),
    StackValidationPolicy(
        name="canary-routes",
        description="VirtualService weights add up to 100, version-override routes come first, every subset exists.",
        validate=canary_routes.canary_routes,
        severity=Severity.HIGH,
        config_schema=schema(
            overrideHeaders={"type": "array", "items": {"type": "string"}, "default": [DEFAULT_OVERRIDE_HEADER]}
        ),
    ),
    ResourceValidationPolicy(
        name="canary-weight-steps",
        description="A canary's weight rises by at most one configured step per change (a new canary starts at the "
        "first step at most), and the canary becomes stable only from the last step (100), unless the release's "
        "step override gives a reason; a LoRA adapter's revision canary likewise, with its model's steps and "
        "override. Compared with previousReleases ({model: {stable, canary, canaryWeight, steps, adapters}}, the "
        "previous deployment's canaryReleases output); without it there is nothing to compare.",
        validate=canary.canary_weight_steps,
        severity=Severity.HIGH,
        config_schema=schema(**canary.PREVIOUS_RELEASES),
    ),
    ResourceValidationPolicy(
        name="canary-step-override",
        description="Records a change that skips canary steps under the release's step override, with its reason.",
        validate=canary.canary_step_override,
        enforcement_level=ADVISORY,
        severity=Severity.LOW,
        config_schema=schema(**canary.PREVIOUS_RELEASES),
    ),
    ResourceValidationPolicy(
        name="serving-performance",
        description="A model server's vLLM workload is deployed as the preview's Serving performance stage judged "
        "it: its serving-shape annotation names a judged shape without failures (the model loads, its KV cache "
        "holds its concurrency, and at the stage's level it meets its latency target and peak); in production a "
        "verdict is required.",
        validate=serving_performance.serving_performance,
        severity=Severity.HIGH,
        config_schema=schema(**serving_performance.SERVING_VERDICTS, productionStacks=PRODUCTION),
    ),
    StackValidationPolicy(
        name="gpu-quota-and-priority",
        description="GPU workloads are bounded by a quota on every GPU resource they use that applies to their "
        "PriorityClass; they name an existing PriorityClass; experiments cannot preempt production.",
        validate=gpu_quotas.gpu_quota_and_priority,
        severity=Severity.HIGH,
        config_schema=schema(
            productionPriorityClass={"type": "string", "default": PRODUCTION_PRIORITY_CLASS},
            externalPriorityClasses={"type": "array", "items": {"type": "string"}, "default": []},
        ),
    ),
    StackValidationPolicy(
        name="gateway-requires-a-token",
        description="The ingress gateway verifies tokens (a RequestAuthentication selects it) and admits only "
        "identified callers: an ALLOW AuthorizationPolicy selects it and each of its rules names request principals "
        "or a mesh identity, except rules limited to the ports and hosts of servers that only redirect to HTTPS.",
        validate=gateway_auth.gateway_requires_a_token,
        severity=Severity.CRITICAL,
    ),
    StackValidationPolicy(
        name="control-plane-availability",
        description="In production what every request depends on runs at least minReplicasInProduction replicas "
        "(the endpoint pickers minEndpointPickerReplicasInProduction), no two on one node (a topologySpreadConstraint "
        "by kubernetes.io/hostname, maxSkew 1, DoNotSchedule, or a required podAntiAffinity by hostname, selecting "
        "its pods), behind exactly one PodDisruptionBudget that keeps a pod up and lets one be evicted: istiod "
        "(autoscaleMin, topologySpreadConstraints, its chart's budget), the ingress gateway (autoscaling.minReplicas, "
        "topologySpreadConstraints, a budget of the stack), Knative Serving's activator, autoscaler, controller, "
        "webhook and net-istio's controller and webhook (KnativeServing spec.high-availability.replicas, "
        "spec.workloads[].topologySpreadConstraints, spec.podDisruptionBudgets[] for the budgets its manifests "
        "bundle, budgets of the stack for the others), the endpoint pickers (spec.replicas, their pods' "
        "topologySpreadConstraints, budgets of the stack), Kueue's manager (controllerManager.replicas, "
        "controllerManager.topologySpreadConstraints, controllerManager.podDisruptionBudget) and the cluster "
        "autoscaler (replicaCount, topologySpreadConstraints, its chart's podDisruptionBudget); every release of the "
        "gateway chart (the egress gateway too) is held alike, its budget selecting its own pods.",
        validate=control_plane.control_plane_availability,
        severity=Severity.HIGH,
        config_schema=schema(
            minReplicasInProduction={
                "type": "integer",
                "default": FLOORS["minControlPlaneReplicasInProduction"],
            },
            minEndpointPickerReplicasInProduction={
                "type": "integer",
                "default": FLOORS["minEndpointPickerReplicasInProduction"],
            },
            productionStacks=PRODUCTION,
        ),
    ),
    StackValidationPolicy(
        name="tenant-egress-by-host",
        description="Egress by host: a workload in a tenant's namespace (model servers, batch jobs, anything but "
        "its endpoint pickers, whose egress NetworkPolicies must keep them to private addresses) keeps the mesh's "
        "sidecar, nothing "
        "taking its traffic around it (capture annotations, exclusions beyond the Pod Identity Agent, the proxy's "
        "user), whose outbound traffic policy (its Sidecar's) is REGISTRY_ONLY over its own namespace (egress hosts "
        "./*), so it connects outside the cluster only to the hosts the namespace's own ServiceEntries name "
        '(exportTo ["."], TLS on 443 resolved by the sidecar, hosts only): S3 endpoints (buckets under the tenant\'s '
        "prefixes or the weight mirror's) and Hugging Face, and every one it reads: its containers' buckets, Hugging "
        "Face for a model or dataset not on S3, and its credentials from the Pod Identity Agent around the sidecar; its "
        "Sidecars see besides only the egress gateway's Service. In production its pods download nothing from "
        "Hugging Face themselves (no model, adapter or dataset not on S3 or local: they read the weight mirror's "
        "copies) and its ServiceEntries name S3 endpoints only, since Hugging Face's wildcard download hosts are "
        "ones no gateway can forward; its hosts go through the egress gateway: no egress NetworkPolicy of a tenant's "
        "reaches a public address (any port, IPv4 or IPv6, a rule without peers included, Hugging Face's download "
        "rule too); each exact host is routed to the egress gateway in a subset of the mesh's mTLS naming it as SNI "
        "(ISTIO_MUTUAL); the gateway's servers for them are ISTIO_MUTUAL, and an ALLOW AuthorizationPolicy selects it "
        "whose rules name tenants' namespaces as their only sources and, by connection.sni, only hosts each of those "
        "tenants' ServiceEntries name.",
        validate=tenant_egress.tenant_egress_by_host,
        severity=Severity.CRITICAL,
    ),
    StackValidationPolicy(
        name="tenant-s3-scoping",
        description="Data belongs to its tenant: a role of a tenant's workloads (by the namespace its pods are in, "
        "which its tag must agree with) grants only S3 objects and listings under a key prefix, under the tenant's "
        "prefixes (tenantS3Prefixes, which when set names every tenant's, else what each tenant's namespace "
        "declares), and in the weight mirror's bucket only reads of the tenant's own copies, which only the "
        "mirror's role for that tenant writes; no NotResource, NotAction or attached policies; no two tenants' "
        "prefixes overlap; no granted key or prefix has an empty path segment ('//', a key prefix of its own to "
        "S3).",
        validate=tenant_s3.tenant_s3_scoping,
        severity=Severity.CRITICAL,
        config_schema=schema(
            tenantS3Prefixes={
                "type": "object",
                "additionalProperties": {"type": "array", "items": {"type": "string", "pattern": FACTS["s3UriPattern"]}},
                "default": {},
            }
        ),
    ),
    StackValidationPolicy(
        name="endpoint-picker-availability",
        description="Endpoint pickers: in production every Deployment and Knative Service of a model server is "
        "picked by one (an InferencePool of its namespace selects its pods: only the picker's queue is bounded in "
        "time per tier; their replicas, spread and budgets: control-plane-availability); every InferencePool names "
        "an existing Service that "
        "selects an endpoint picker's pods; picker pods stay in the mesh and no tenant PeerAuthentication accepts "
        "plaintext (PERMISSIVE or DISABLE).",
        validate=endpoint_pickers.endpoint_picker_availability,
        severity=Severity.HIGH,
        config_schema=schema(productionStacks=PRODUCTION),
    ),
    ResourceValidationPolicy(
        name="pinned-images",
        description="Container images come from an allowed repository (by default those of the images the program "
        "pins, not their whole registries) and are pinned to a digest or a tag that is not a mutable one ('latest').",
        validate=images.pinned_images,
        severity=Severity.HIGH,
        config_schema=schema(
            allowedRepositories={**STRINGS, "default": PINNED_REPOSITORIES},
            deniedTags={**STRINGS, "default": FORBIDDEN_TAGS},
        ),
    ),
    ResourceValidationPolicy(
        name="image-digests",
        description="In production, every container image a pod pulls is named by its digest (the stack's image lock, "
        "`images.lockFile`), not only by a tag that can be moved, and every chart release sets its images' digests "
        "where the chart reads them.",
        validate=images.image_digests,
        severity=Severity.HIGH,
        config_schema=schema(productionStacks=PRODUCTION),
    ),
    ResourceValidationPolicy(
        name="pod-security-baseline",
        description="Every pod: no host namespaces, hostPath, hostPort, privileged containers, privilege escalation, "
        "added capabilities but NET_BIND_SERVICE, custom SELinux options, AppArmor or seccomp profiles other than "
        "RuntimeDefault or Localhost (fields and annotations), procMount other than Default, Windows hostProcess, "
        "sysctls outside the baseline's safe set, or ephemeral containers in a template.",
        validate=pod_security.pod_security_baseline,
        severity=Severity.CRITICAL,
    ),
    ResourceValidationPolicy(
        name="model-server-hardening",
        description="GPU pods run as non-root, with allowPrivilegeEscalation false and every capability dropped.",
        validate=pod_security.model_server_hardening,
        severity=Severity.HIGH,
    ),
    ResourceValidationPolicy(
        name="no-plain-secret-env",
        description="No secret-looking environment variable carries a plain value, and no environment value is a "
        "credential of a known format.",
        validate=credentials.no_plain_secret_env,
        severity=Severity.CRITICAL,
    ),
    ResourceValidationPolicy(
        name="no-secret-args",
        description="No command line carries a credential (--api-key, --hf-token, token=..., or a token of a known "
        "format: Hugging Face, AWS, GitHub, GitLab, npm, Docker Hub, Stripe, Slack, Anthropic, OpenAI, Google, a "
        "private key, a JWT).",
        validate=credentials.no_secret_args,
        severity=Severity.CRITICAL,
    ),
    ResourceValidationPolicy(
        name="shell-scripts-quote-config",
        description="A shell script (sh -c, bash -c, ... in any container's command, hooks or probes) that names an "
        "S3 or Hugging Face location is one the platform renders (its shapes, in the pack's facts), each location "
        "single-quoted in its slot and one config may give (s3://<bucket>/<letters, digits and -_.=/>), so no config "
        "value can become shell syntax.",
        validate=shell_scripts.shell_scripts_quote_config,
        severity=Severity.CRITICAL,
    ),
    ResourceValidationPolicy(
        name="no-secret-env-from",
        description="Containers take the Secret keys they need (env valueFrom), never a whole Secret (envFrom), outside "
        "the namespaces allowed.",
        validate=credentials.no_secret_env_from,
        severity=Severity.HIGH,
        config_schema=schema(allowedNamespaces={**STRINGS, "default": []}),
    ),
    ResourceValidationPolicy(
        name="no-secrets-in-helm-values",
        description="Helm release values carry no secret-looking value in clear.",
        validate=credentials.no_secrets_in_helm_values,
        severity=Severity.CRITICAL,
    ),
    ResourceValidationPolicy(
        name="no-secrets-in-config-maps",
        description="No ConfigMap key or value (data, and binaryData decoded) holds a credential of a known format "
        "(the program's list, in the pack's facts).",
        validate=credentials.no_secrets_in_config_maps,
        severity=Severity.CRITICAL,
    ),
    StackValidationPolicy(
        name="gpu-jobs-through-kueue",
        description="A Job (or a CronJob's jobs) in a tenant namespace that asks for GPUs carries the label "
        "kueue.x-k8s.io/queue-name naming a LocalQueue of its own namespace: without it (and without a LocalQueue named "
        "default, which the platform declares none of) Kueue leaves the Job alone and it runs outside the tenant's "
        "batch quota.",
        validate=kueue.gpu_jobs_through_kueue,
        severity=Severity.HIGH,
        # LocalQueues declared outside the stack, as namespace/name.
        config_schema=schema(externalLocalQueues={**kueue.LOCAL_QUEUE_REFS, "default": []}),
    ),
    StackValidationPolicy(
        name="stack-capacity",
        description="Tenant GPU quotas fit the pools' capacity; every GPU resource a workload asks for exists in a pool; "
        "MIG profiles are valid for the pool's GPU.",
        validate=gpu_quotas.stack_capacity,
        severity=Severity.HIGH,
        config_schema=schema(overcommitRatio={"type": "number", "default": 1.0}),
    ),
    StackValidationPolicy(
        name="model-server-monitoring",
        description="Model servers are scraped by a ServiceMonitor or PodMonitor.",
        validate=monitoring.model_server_monitoring,
        enforcement_level=ADVISORY,
        severity=Severity.MEDIUM,
    ),
    ResourceValidationPolicy(
        name="gpu-topology-spread",
        description="Replicated GPU Deployments spread over nodes.",
        validate=gpu_placement.topology_spread,
        enforcement_level=ADVISORY,
        severity=Severity.LOW,
    ),
    StackValidationPolicy(
        name="adapter-names-unique",
        description="A LoRA adapter's OpenAI name is unique cluster-wide: the adapters of one base model, never "
        "another model's adapter or a name a server answers to as a model.",
        validate=adapters.adapter_names_unique,
        severity=Severity.HIGH,
    ),
    ResourceValidationPolicy(
        name="adapter-on-own-tenants-base",
        description="A model server loads only LoRA adapters its own tenant owns: an adapter never rides on another "
        "tenant's base model.",
        validate=adapters.adapter_on_own_tenants_base,
        severity=Severity.HIGH,
    ),
    StackValidationPolicy(
        name="latency-sensitive-on-spot",
        description="Latency-sensitive workloads on spot capacity can be interrupted.",
        validate=latency.latency_sensitive_on_spot,
        enforcement_level=ADVISORY,
        severity=Severity.MEDIUM,
        config_schema=schema(**LATENCY_TIERS),
    ),
]
