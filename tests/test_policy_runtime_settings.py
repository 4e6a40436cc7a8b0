"""The pack applies its runtime settings on each analyzer call as pulumi-policy 1.21.0 does, with the environment
read once (policies/inference_governance/runtime_settings.py): each call in a new, empty context, as grpcio runs it."""

from __future__ import annotations

import contextvars
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pulumi.runtime import config as runtime_config
from pulumi.runtime import settings

from .helpers import ROOT

sys.path.insert(0, str(ROOT / "policies"))
from inference_governance import runtime_settings  # noqa: E402
from pulumi_policy import policy as sdk  # noqa: E402

SDK_CONFIGURE = sdk._PolicyAnalyzerServicer.__dict__["_configure_runtime_settings"]


@pytest.fixture
def fresh_config() -> Iterator[dict[str, Any]]:
    """The config variable's default dict (a new context's, shared by every context that never set it), emptied
    before and restored after."""
    shared = runtime_config.CONFIG.get()
    saved = dict(shared)
    shared.clear()
    yield shared
    shared.clear()
    shared.update(saved)


def _applied(configure: Callable[[], None]) -> dict[str, Any]:
    """What a call applies, read in the call's own context (a new one each, as grpcio 1.85.3's server makes)."""

    def call() -> dict[str, Any]:
        configure()
        return {
            "config": dict(runtime_config.CONFIG.get()),
            "project": settings.SETTINGS.project,
            "stack": settings.SETTINGS.stack,
            "dry_run": settings.SETTINGS.dry_run,
            "organization": settings.SETTINGS.organization,
        }

    return contextvars.Context().run(call)


ENVIRONMENTS = {
    "the CLI's": {
        "PULUMI_CONFIG": json.dumps({"inference-platform:environment": "prod", "aws:region": "us-east-1"}),
        "PULUMI_PROJECT": "inference-platform",
        "PULUMI_STACK": "prod",
        "PULUMI_DRY_RUN": "true",
        "PULUMI_ORGANIZATION": "platform-team",
    },
    "no organization, an update": {
        "PULUMI_CONFIG": json.dumps({"inference-platform:environment": "dev"}),
        "PULUMI_PROJECT": "inference-platform",
        "PULUMI_STACK": "dev",
        "PULUMI_DRY_RUN": "false",
    },
    "no stack given": {"PULUMI_CONFIG": json.dumps({"a:b": "c"}), "PULUMI_PROJECT": "p", "PULUMI_DRY_RUN": "true"},
    "no config": {"PULUMI_PROJECT": "p", "PULUMI_STACK": "s", "PULUMI_DRY_RUN": "true"},
}
VARIABLES = ("PULUMI_CONFIG", "PULUMI_PROJECT", "PULUMI_STACK", "PULUMI_DRY_RUN", "PULUMI_ORGANIZATION")


@pytest.mark.parametrize("name", ENVIRONMENTS)
def test_each_call_applies_what_the_sdks_configuration_applies(
    name: str, monkeypatch: pytest.MonkeyPatch, fresh_config: dict[str, Any]
) -> None:
    for variable in VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    for variable, value in ENVIRONMENTS[name].items():
        monkeypatch.setenv(variable, value)
    servicer = object.__new__(sdk._PolicyAnalyzerServicer)
    expected = _applied(lambda: SDK_CONFIGURE(servicer))
    fresh_config.clear()
    # Twice: the second call reads the remembered JSON, in a context of its own again.
    assert _applied(runtime_settings.configure_runtime_settings) == expected
    fresh_config.clear()
    assert _applied(runtime_settings.configure_runtime_settings) == expected


def test_a_changed_environment_is_read_anew(monkeypatch: pytest.MonkeyPatch, fresh_config: dict[str, Any]) -> None:
    for variable, value in ENVIRONMENTS["the CLI's"].items():
        monkeypatch.setenv(variable, value)
    _applied(runtime_settings.configure_runtime_settings)
    monkeypatch.setenv("PULUMI_CONFIG", json.dumps({"inference-platform:environment": "staging"}))
    monkeypatch.setenv("PULUMI_STACK", "staging")
    applied = _applied(runtime_settings.configure_runtime_settings)
    assert applied["config"]["inference-platform:environment"] == "staging"
    assert applied["stack"] == "staging"


def test_the_pack_configures_its_calls_so() -> None:
    """The pack's entry point installs it (policies/__main__.py), before the pack serves."""
    source = (ROOT / "policies" / "__main__.py").read_text()
    assert "read_environment_once()" in source.split("PolicyPack(")[0]
    runtime_settings.read_environment_once()
    try:
        assert sdk._PolicyAnalyzerServicer._configure_runtime_settings is runtime_settings.configure_runtime_settings
    finally:
        setattr(sdk._PolicyAnalyzerServicer, "_configure_runtime_settings", SDK_CONFIGURE)
