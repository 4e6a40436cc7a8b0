"""Serving backends: one module per mode, registered by the mode that selects it; nothing else
branches on the mode."""

from __future__ import annotations

import re
from typing import get_args

import pytest

from components.backends import BACKENDS, RegistryError, ServingBackend, registry
from platform_config.profiles import AutoscalingMode

from .helpers import ROOT


def test_every_mode_the_config_accepts_has_a_backend_and_no_other():
    assert list(BACKENDS) == list(get_args(AutoscalingMode))
    for mode, backend in BACKENDS.items():
        assert isinstance(backend, ServingBackend) and backend.mode == mode


def test_the_registry_refuses_a_second_backend_an_unknown_mode_or_a_missing_one():
    classes = [type(b) for b in BACKENDS.values()]
    assert list(registry(classes)) == list(BACKENDS)
    # A class built on a backend for a mode of its own must not take the parent's mode silently.
    twin = type("TwinKnative", (classes[-1],), {})
    with pytest.raises(RegistryError, match="both claim mode"):
        registry([*classes, twin])
    stray = type("StrayBackend", (classes[0],), {"mode": "warp"})
    with pytest.raises(RegistryError, match="mode 'warp'"):
        registry([*classes, stray])
    with pytest.raises(RegistryError, match="no backend for mode"):
        registry(classes[:1])


def test_nothing_outside_the_backends_names_a_mode():
    # A mode's knowledge lives in its backend module; the rest of the program asks the model's
    # backend. (The config's list of choices is the one registration.)
    named = re.compile(r"""["'](hpa|kpa)["']""")
    allowed = {ROOT / "platform_config" / "profiles.py"}
    offenders = []
    for folder in ("components", "platform_config", "preview"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "backends" in path.parts or path in allowed:
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if named.search(line) and not line.lstrip().startswith("#"):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []


def test_each_backend_says_how_its_versions_are_reached_and_drained():
    deployment, knative = BACKENDS["hpa"], BACKENDS["kpa"]
    assert deployment.pod_shape.drains_in_pod and not knative.pod_shape.drains_in_pod
    assert deployment.shared_destination_rule is None and knative.shared_destination_rule is not None
    assert deployment.subsets_are_servers and not knative.subsets_are_servers
    assert knative.scales_to_zero and not deployment.scales_to_zero
    assert deployment.machinery == {"metrics-adapter"} and knative.machinery == {"knative"}


def test_the_platform_installs_every_machinery_a_backend_may_name():
    # mypy holds the backends to MachineryName; this holds the platform to installing each.
    from components.shapes import MachineryName

    source = (ROOT / "components" / "platform.py").read_text()
    assert [name for name in get_args(MachineryName) if f'if "{name}" in needed:' not in source] == []
