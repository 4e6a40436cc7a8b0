"""The config reference (docs/reference/config.md) and the stack-file JSON schema are generated from the
models' docstrings and types, and are current; the schema accepts every stack file and refuses
what the loader refuses."""

from __future__ import annotations

import json
from typing import Any, get_args

import jsonschema
import pytest
from pydantic import BaseModel

from platform_config.models import PlatformConfig
from platform_config.reference import (
    MARKDOWN_FILE,
    PROJECT_FILE,
    SCHEMA_FILE,
    config_reference,
    project_file,
    project_summaries,
    rendered_schema,
)
from preview.policy_reference import POLICIES_FILE, pack_info, policy_reference
from preview.stack_config import load_yaml

from .helpers import ROOT, STACKS, stack_file


def test_generated_files_are_current():
    assert MARKDOWN_FILE.read_text() == config_reference(), "stale docs/reference/config.md: run `make docs`"
    assert SCHEMA_FILE.read_text() == rendered_schema(), "stale docs/reference/stack-file.schema.json: run `make docs`"
    assert PROJECT_FILE.read_text() == project_file(), "stale Pulumi.yaml summaries: run `make docs`"


def test_each_structured_keys_summary_names_every_key_it_holds():
    # The summaries once missed keys added later (callers, endpointPicker, slo, adapters, lora, ...).
    summaries = project_summaries()
    assert set(summaries) == {
        "cluster", "nodePools", "tenants", "models", "traffic", "profiles", "capacity", "monitoring", "coldStart",
        "registry", "images", "weightMirror", "batchJobs",
    }  # fmt: skip
    for key in ("callers", "endpointPicker", "slo", "adapters", "lora"):
        assert f" {key}," in summaries["models"] or f" {key}}}" in summaries["models"], key
    assert summaries["cluster"].startswith("object — where the platform runs: {name, mode: eks|kubeconfig, ")


def test_the_policy_reference_is_what_the_pack_answers():
    assert POLICIES_FILE.read_text() == policy_reference(pack_info()), "stale docs/reference/policies.md: run `make docs`"


def test_every_key_is_described():
    """Every field has a docstring, read as its description by the reference generator (`described_models`)."""
    from platform_config.reference import described_models

    described_models()

    def walk(model: type[BaseModel], path: str) -> list[str]:
        missing = []
        for name, field in model.model_fields.items():
            key = f"{path}{field.alias or name}"
            if not field.description:
                missing.append(key)
            for inner in _models_in(field.annotation):
                missing += walk(inner, f"{key}.")
        return missing

    assert walk(PlatformConfig, "") == []


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


def validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text()))


@pytest.mark.parametrize("stack", STACKS)
def test_the_schema_accepts_every_stack_file(stack):
    assert list(validator().iter_errors(load_yaml(stack_file(stack).read_text()))) == []


def test_the_schema_refuses_what_the_loader_refuses():
    data = load_yaml(stack_file("prod").read_text())
    data["config"]["inference-platfrom:models"] = data["config"].pop("inference-platform:models")
    data["config"]["inference-platform:nodePools"][0]["maxSize"] = "9"
    data["config"]["inference-platform:traffic"]["tiers"] = {"gold": {}, "premium": {"timeout": "2 minutes"}}
    messages = [error.message for error in validator().iter_errors(data)]
    assert any("inference-platfrom:models" in m for m in messages), messages
    assert any("'9' is not of type 'integer'" in m for m in messages), messages
    assert any("'gold'" in m for m in messages), messages
    assert any("'2 minutes' does not match" in m for m in messages), messages


def test_the_schema_takes_each_secret_in_its_own_shape():
    """registryToken is one secret value; huggingFaceTokens one secret per tenant; plain values of
    either are refused (as the loader refuses them)."""
    data = load_yaml(stack_file("staging").read_text())
    config = data["config"]
    config["inference-platform:registryToken"] = {"secure": "v1:registry"}
    config["inference-platform:huggingFaceTokens"] = {"team-a": {"secure": "v1:hf"}}
    assert list(validator().iter_errors(data)) == []
    for key, plain in (("registryToken", "a-token"), ("huggingFaceTokens", {"team-a": "hf_plain"})):
        wrong = {**config, f"inference-platform:{key}": plain}
        assert list(validator().iter_errors({**data, "config": wrong})), key


def test_the_notes_name_only_outputs_the_program_exports():
    """Every output the reference's notes name in backticks is one the program exports."""
    import re

    from platform_config.reference import NOTES

    exported = set(re.findall(r'pulumi\.export\("([A-Za-z]+)"', (ROOT / "__main__.py").read_text()))
    named = set(re.findall(r"`([A-Za-z]+)` output", NOTES))
    assert named and named <= exported, named - exported
