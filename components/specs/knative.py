"""Knative Serving as the platform needs it (KnativeServing custom resource, pure)."""

from __future__ import annotations

from typing import Any

from platform_config.pins import KNATIVE_SERVING_VERSION

from ..backends.knative import KNATIVE_ACTIVATOR_GRACE_SECONDS
from ..constants import KNATIVE_SERVING_NAMESPACE

# Pod fields model servers use that Knative admits only behind feature flags.
REQUIRED_FEATURES = (
    "kubernetes.podspec-nodeselector",
    "kubernetes.podspec-tolerations",
    "kubernetes.podspec-affinity",
    "kubernetes.podspec-securitycontext",
    "kubernetes.podspec-priorityclassname",
    "kubernetes.podspec-init-containers",
    "kubernetes.podspec-volumes-emptydir",
)


def knative_serving() -> dict[str, Any]:
    return {
        "apiVersion": "operator.knative.dev/v1beta1",
        "kind": "KnativeServing",
        "metadata": {"name": "knative-serving", "namespace": KNATIVE_SERVING_NAMESPACE},
        "spec": {
            "version": KNATIVE_SERVING_VERSION,
            "ingress": {"istio": {"enabled": True}},
            "config": {
                # Every value is a string: spec.config is map[string]map[string]string.
                "features": {feature: "enabled" for feature in REQUIRED_FEATURES},
                "autoscaler": {
                    "enable-scale-to-zero": "true",
                    "allow-zero-initial-scale": "true",
                    "scale-to-zero-grace-period": "30s",
                },
                "defaults": {
                    "revision-timeout-seconds": "300",
                    # Batch and summarisation requests may run for many minutes, but never past
                    # what the activator drains (the config checks hold every model to it).
                    "max-revision-timeout-seconds": str(KNATIVE_ACTIVATOR_GRACE_SECONDS),
                },
            },
        },
    }
