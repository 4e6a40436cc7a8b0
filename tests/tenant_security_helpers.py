"""What the least-privilege tenant tests share (tests/test_tenant_security.py, tests/test_tenant_network.py): prod
with each tenant's own Hugging Face token, with and without its weight mirror (module fixtures, each evaluated once
per test process), and a namespace's manifests of a kind."""

from __future__ import annotations

import json

import pytest

from .helpers import Evaluated, downloading_weights, prod_with_labeller_server, split_module_value

TOKENS_KEY = "inference-platform:huggingFaceTokens"
# Each tenant's own token; team-b serves an ungated model and has none.
PROD_TOKENS = {"serving": "hf_serving_token", "team-a": "hf_team_a_token"}


@pytest.fixture(scope="module")
def prod() -> Evaluated:
    """prod with its batch-labelling server, without its weight mirror and so outside production (staging), its pools
    downloading Hugging Face weights themselves (each tenant's servers read the tenant's token)."""
    return split_module_value(
        "tests/test_tenant_security.py prod",
        lambda: Evaluated(
            downloading_weights(prod_with_labeller_server()), secrets={TOKENS_KEY: json.dumps(PROD_TOKENS)}, shared=True
        ),
    )


@pytest.fixture(scope="module")
def mirrored() -> Evaluated:
    """prod as shipped: its weight mirror's Jobs download the Hugging Face revisions, its servers stream the copies."""
    return split_module_value(
        "tests/test_tenant_security.py mirrored",
        lambda: Evaluated(prod_with_labeller_server(), secrets={TOKENS_KEY: json.dumps(PROD_TOKENS)}, shared=True),
    )


def manifests(evaluated: Evaluated, kind: str, namespace: str) -> list[dict]:
    return [m for m in evaluated.manifests() if m["kind"] == kind and m["metadata"].get("namespace") == namespace]
