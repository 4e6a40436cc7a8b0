"""Pulumi.yaml declares every top-level config key, in step with the pydantic models."""

from __future__ import annotations

import json

import yaml

from platform_config.models import PROJECT, SECRET_KEYS, PlatformConfig

from .helpers import ROOT

# Pulumi's project schema can type only these; structured keys carry a description and default.
SIMPLE_TYPES = {"string", "integer", "boolean", "array"}


def project() -> dict:
    return yaml.safe_load((ROOT / "Pulumi.yaml").read_text())


def test_project_basics():
    data = project()
    assert data["name"] == PROJECT
    assert data["runtime"] == {"name": "python", "options": {"toolchain": "pip", "virtualenv": ".venv"}}
    assert data["stackConfigDir"] == "stacks"


def test_every_top_level_key_is_declared_with_a_description():
    declared = project()["config"]
    keys = {field.alias for field in PlatformConfig.model_fields.values()} | set(SECRET_KEYS)
    assert set(declared) == keys
    for key, declaration in declared.items():
        assert declaration.get("description"), key
        assert declaration.get("type", "string") in SIMPLE_TYPES, key


def test_required_keys_have_no_default_and_optional_keys_default_to_the_model_default():
    declared = project()["config"]
    for name, field in PlatformConfig.model_fields.items():
        declaration = declared[field.alias]
        if field.is_required():
            assert "default" not in declaration, field.alias
            continue
        assert "default" in declaration, field.alias
        # The project default parses to the same value as the model's own default.
        parsed = PlatformConfig.model_fields[name].annotation
        default = declaration["default"]
        model_default = field.get_default(call_default_factory=True)
        dumped = json.loads(json.dumps(default))
        if hasattr(model_default, "model_dump"):
            assert type(model_default).model_validate(dumped, by_alias=True, by_name=False) == model_default, field.alias
        else:
            assert dumped == model_default or (dumped == {} and model_default == {}), (field.alias, parsed)


def test_secret_keys_are_declared_secret():
    declared = project()["config"]
    for key in SECRET_KEYS:
        assert declared[key]["secret"] is True


def test_stack_files_use_only_declared_keys():
    declared = set(project()["config"])
    for path in (ROOT / "stacks").glob("Pulumi.*.yaml"):
        for key in yaml.safe_load(path.read_text())["config"]:
            namespace, name = key.split(":", 1)
            if namespace == PROJECT:
                assert name in declared, (path.name, key)
