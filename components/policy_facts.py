"""The facts the policy pack shares with the program, generated from the program's own modules.

The pack is installed and published on its own (its own virtualenv, no import of this project),
so it reads these from `policies/inference_governance/platform_facts.json`, which this module
writes: `python -m components.policy_facts` (or `make policy-facts`). A test fails when the file
is stale, so the GPU catalog, label keys, annotations and image rule cannot drift apart.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from platform_config.credentials import CREDENTIAL_FORMATS
from platform_config.floors import FLOORS
from platform_config.gpu_catalog import GPU_MODELS, GPU_RESOURCE, MIG_RESOURCE_PREFIX
from platform_config.models import (
    FORBIDDEN_IMAGE_TAGS,
    IMAGE_DIGEST_PATTERN,
    IMAGE_TAG_PATTERN,
    S3_URI_PATTERN,
    ReleaseConfig,
    TrafficConfig,
)
from platform_config.namespaces import MIRROR_NAMESPACE
from platform_config.pins import ENDPOINT_PICKER, ENVOY_PROXY, IMAGES, KUEUE_API_VERSION
from platform_config.profiles import PRODUCTION_PRIORITY_CLASS
from platform_config.tenant_data import ANNOTATION_S3_PREFIXES

from .backends.knative import KNATIVE_REVISION_LABEL, KNATIVE_SERVICE_LABEL, TARGET_BURST_CAPACITY
from .constants import (
    GATEWAY_LISTENER_PORTS,
    GATEWAY_SELECTOR,
    GPU_TAINT_KEY,
    ISTIO_INGRESS_NAMESPACE,
    LABEL_GPU_SHARING,
    LABEL_LATENCY_SENSITIVE,
    LABEL_MODEL,
    LABEL_POOL,
)
from .plan_reports import SERVING_SHAPE_ANNOTATION
from .specs.kueue import QUEUE_NAME_LABEL
from .specs.network import POD_IDENTITY_AGENT_CIDRS, PRIVATE_CIDRS
from .specs.pod import ANNOTATION_LORA_ADAPTERS
from .specs.pod_parts import NO_GPU_ENV
from .specs.routes import (
    ADAPTER_RELEASES_ANNOTATION,
    CANARY_STEP_OVERRIDE_ANNOTATION,
    CANARY_STEPS_ANNOTATION,
    CANARY_VERSION_ANNOTATION,
    CANARY_WEIGHT_ANNOTATION,
    CANARY_WEIGHTS_ANNOTATION,
    OVERRIDE_HEADER_ANNOTATION,
    STABLE_VERSION_ANNOTATION,
    STABLE_WEIGHTS_ANNOTATION,
)
from .specs.weight_mirror import MIRROR_SERVICE_ACCOUNT_PREFIX
from .workload_identity import TAG_MIRROR_FOR, TAG_TENANT

FACTS_FILE = Path(__file__).resolve().parent.parent / "policies" / "inference_governance" / "platform_facts.json"


def policy_facts() -> dict[str, Any]:
    return {
        "generatedBy": "python -m components.policy_facts",
        "gpuResource": GPU_RESOURCE,
        "migResourcePrefix": MIG_RESOURCE_PREFIX,
        "migProfiles": {name: sorted(gpu.mig_profiles) for name, gpu in sorted(GPU_MODELS.items()) if gpu.mig_profiles},
        "labels": {
            "pool": LABEL_POOL,
            "latencySensitive": LABEL_LATENCY_SENSITIVE,
            "gpuSharing": LABEL_GPU_SHARING,
            "knativeService": KNATIVE_SERVICE_LABEL,
            "knativeRevision": KNATIVE_REVISION_LABEL,
            "model": LABEL_MODEL,
        },
        "defaults": {
            "overrideHeader": ReleaseConfig.model_fields["override_header"].default,
            "productionPriorityClass": PRODUCTION_PRIORITY_CLASS,
            "tierHeader": TrafficConfig.model_fields["tier_header"].default,
            "canarySteps": ReleaseConfig.model_fields["steps"].default,
        },
        "annotations": {
            "overrideHeader": OVERRIDE_HEADER_ANNOTATION,
            "stableVersion": STABLE_VERSION_ANNOTATION,
            "canaryVersion": CANARY_VERSION_ANNOTATION,
            "canaryWeight": CANARY_WEIGHT_ANNOTATION,
            "canarySteps": CANARY_STEPS_ANNOTATION,
            "canaryStepOverride": CANARY_STEP_OVERRIDE_ANNOTATION,
            "stableWeights": STABLE_WEIGHTS_ANNOTATION,
            "canaryWeights": CANARY_WEIGHTS_ANNOTATION,
            "adapterReleases": ADAPTER_RELEASES_ANNOTATION,
            "loraAdapters": ANNOTATION_LORA_ADAPTERS,
            "servingShape": SERVING_SHAPE_ANNOTATION,
        },
        # The ingress gateway's pods, and the listener port each Gateway server port is served on.
        "gateway": {
            "namespace": ISTIO_INGRESS_NAMESPACE,
            "selector": dict(GATEWAY_SELECTOR),
            "listenerPorts": {str(port): listener for port, listener in GATEWAY_LISTENER_PORTS.items()},
        },
        # The label a Job is queued by, and the LocalQueue's type token as the program declares it.
        # The burst capacity every Knative Service sets (the activator out of the path once a replica is ready).
        "knative": {"targetBurstCapacity": str(TARGET_BURST_CAPACITY)},
        # GPU nodes' taint, and what a container that may run on one without asking for a GPU sets to see none.
        "gpuTaint": {"key": GPU_TAINT_KEY},
        "noGpuEnv": dict(NO_GPU_ENV[0]),
        "kueue": {"queueNameLabel": QUEUE_NAME_LABEL, "localQueueType": f"kubernetes:{KUEUE_API_VERSION}:LocalQueue"},
        # Where a tenant's endpoint pickers may connect by address (components/specs/network.py): the private ranges
        # and the Pod Identity Agent; in-cluster peers by selector.
        "pickerEgressCidrs": [*PRIVATE_CIDRS, *POD_IDENTITY_AGENT_CIDRS],
        # Policy config defaults, which the config checks hold stacks to as well.
        "floors": FLOORS.policy_defaults(),
        # What an S3 location config may give (platform_config/models.py): the pack holds every one
        # a shell script names to it, single-quoted.
        "s3UriPattern": S3_URI_PATTERN,
        # Whose an IAM role is, and the prefixes a tenant's data lies under (platform_config/tenant_data.py).
        "tenantData": {
            "tenantTag": TAG_TENANT,
            "weightMirrorTag": TAG_MIRROR_FOR,
            "s3PrefixesAnnotation": ANNOTATION_S3_PREFIXES,
            "mirrorNamespace": MIRROR_NAMESPACE,
            "mirrorServiceAccountPrefix": MIRROR_SERVICE_ACCOUNT_PREFIX,
        },
        # What a credential looks like in clear (platform_config/credentials.py).
        "credentialFormats": [list(entry) for entry in CREDENTIAL_FORMATS],
        "images": {
            "tagPattern": IMAGE_TAG_PATTERN,
            "digestPattern": IMAGE_DIGEST_PATTERN,
            "forbiddenTags": list(FORBIDDEN_IMAGE_TAGS),
            # The pack allows the registries of the images the program pins, unless told otherwise.
            "pinnedRepositories": sorted(pin.repository for pin in IMAGES),
            # What an endpoint picker's pods run (components/specs/endpoint_picker/pods.py): the EPP and its Envoy.
            "endpointPickerRepositories": sorted(pin.repository for pin in (ENDPOINT_PICKER, ENVOY_PROXY)),
        },
    }


def rendered() -> str:
    return json.dumps(policy_facts(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    FACTS_FILE.write_text(rendered())
    print(f"wrote {FACTS_FILE}", file=sys.stderr)
