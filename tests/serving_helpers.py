"""What the serving tests share (tests/test_serving.py and the modules beside it): prod downloading its weights with
its tenants' Hugging Face tokens, a server's pod, container and flags, a Knative Service by name."""

from __future__ import annotations

import json

from .helpers import Evaluated, downloading_weights, prod_with_labeller_server

# Each tenant's own Hugging Face token (team-b serves an ungated model and has none).
PROD_TOKENS = json.dumps({"serving": "hf_serving_token", "team-a": "hf_team_a_token"})


def pod(deployment_or_ksvc: dict) -> dict:
    return deployment_or_ksvc["spec"]["template"]["spec"]


def container(obj: dict) -> dict:
    (vllm,) = [c for c in pod(obj)["containers"] if c["name"] == "vllm"]
    return vllm


def arg(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def ksvc(evaluated: Evaluated, name: str, namespace: str) -> dict:
    (found,) = [
        m
        for m in evaluated.manifests()
        if m["apiVersion"] == "serving.knative.dev/v1"
        and m["metadata"]["name"] == name
        and m["metadata"]["namespace"] == namespace
    ]
    return found


def prod_downloading_weights() -> Evaluated:
    """prod with its batch-labelling server, its pools downloading Hugging Face weights onto their instance store:
    the servers' own download path (prod as shipped streams its weight mirror's copies: tests/test_weight_mirror.py)."""
    return Evaluated(
        downloading_weights(prod_with_labeller_server()),
        secrets={"inference-platform:huggingFaceTokens": PROD_TOKENS},
        shared=True,
    )
