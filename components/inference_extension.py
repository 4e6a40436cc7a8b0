"""The CRDs an llm-d endpoint picker (EPP) reads: InferencePool from the Gateway API Inference
Extension, InferenceObjective and InferenceModelRewrite from llm-d-router, each from its pinned
release manifest."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pulumi

from platform_config.pins import GATEWAY_API_INFERENCE_EXTENSION_VERSION, LLM_D_ROUTER_VERSION

from .constants import PACKAGE
from .k8s_objects import YamlConfigFile

# The releases' tags (both pinned in platform_config/pins.py).
GATEWAY_API_INFERENCE_EXTENSION_TAG = f"v{GATEWAY_API_INFERENCE_EXTENSION_VERSION}"
LLM_D_ROUTER_TAG = f"v{LLM_D_ROUTER_VERSION}"
# The Gateway API Inference Extension's `v1-manifests.yaml`: the v1 CRDs only, i.e. InferencePool
# alone (Makefile `artifacts` at v1.5.0: `select(.spec.versions[].name == "v1")` of config/crd;
# the full `manifests.yaml` adds the inference.networking.x-k8s.io v1alpha CRDs, which the llm-d
# EPP does not need). The same URL llm-d-router v0.10.0 installs from
# (deploy/components/crds-gie/kustomization.yaml).
INFERENCE_POOL_CRDS_URL = (
    "https://github.com/kubernetes-sigs/gateway-api-inference-extension/releases/download/"
    f"{GATEWAY_API_INFERENCE_EXTENSION_TAG}/v1-manifests.yaml"
)

# llm-d-router's own CRDs at the EPP's release: InferenceObjective (a request's priority, by the
# x-llm-d-inference-objective header) and InferenceModelRewrite, both llm-d.ai/v1alpha2
# (config/crd/bases at v0.10.0, commit 71f4f0999f95). Release asset `manifests.yaml`: Makefile
# `artifacts` keeps the `llm-d.ai` CRDs of config/crd; .github/workflows/ci-release.yaml (on a
# v* tag) runs `make artifacts BUNDLE_VERSION=<tag>` and uploads every non-empty file with
# `gh release upload <tag>`. (Its `v1-manifests.yaml` is empty, as both CRDs are v1alpha2, so
# it is not uploaded.)
LLM_D_CRDS_URL = f"https://github.com/llm-d/llm-d-router/releases/download/{LLM_D_ROUTER_TAG}/manifests.yaml"


class InferenceExtensionCrds(pulumi.ComponentResource):
    """Cluster-wide CRDs, no inputs (their versions are pinned in platform_config/pins.py): install once, before any
    InferencePool, EPP or prometheus-adapter rule that names the inferencepools resource (those
    depend on this component). Without the llm-d.ai CRDs the EPP still runs, finding them absent
    through discovery (pkg/epp/server/controller_config.go), but gives every request the default
    priority."""

    # Declared for the type checker only: pulumi evaluates a resource class's annotations at each registration
    # (pulumi 3.272.0 _types.resource_types, uncached), importing what they name.
    if TYPE_CHECKING:
        inference_pool: YamlConfigFile
        llm_d: YamlConfigFile

    def __init__(self, name: str, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{PACKAGE}:inference-extension:InferenceExtensionCrds", name, None, opts)
        self.inference_pool = YamlConfigFile(
            f"{name}-inference-pool", INFERENCE_POOL_CRDS_URL, pulumi.ResourceOptions(parent=self)
        )
        self.llm_d = YamlConfigFile(f"{name}-llm-d", LLM_D_CRDS_URL, pulumi.ResourceOptions(parent=self))
        self.register_outputs(
            {
                "gatewayApiInferenceExtensionVersion": GATEWAY_API_INFERENCE_EXTENSION_TAG,
                "llmDRouterVersion": LLM_D_ROUTER_TAG,
            }
        )
