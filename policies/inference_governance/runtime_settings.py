"""The pack's runtime settings made for each request from what was read from the environment once.

pulumi-policy 1.21.0 (`pulumi_policy/policy.py`, `_PolicyAnalyzerServicer._configure_runtime_settings`) runs at
the start of every `Analyze` and `AnalyzeStack` call: it parses PULUMI_CONFIG (JSON) again, sets each key, reads
`inspect.signature(pulumi.runtime.Settings)` again, and builds and applies a `Settings`. The settings must be applied
per call: grpcio 1.85.3 runs each call in a new, empty `contextvars.Context` (`grpc/_server.py` `_RPCState`), and the
SDK's settings are context variables (pulumi 3.272.0 `runtime/settings.py`). What they are made from cannot change
while the pack runs (its environment is set when the CLI starts it), so the JSON and the signature are read once:
at 500 models, 22,000 calls spent about 100 µs each on them, 7.5% of the pack's time in a py-spy profile.
"""

from __future__ import annotations

import functools
import json
import os
from inspect import signature
from typing import Any

import pulumi.runtime
import pulumi_policy.policy as sdk

from .decoding import sdk_as_is

_SETTINGS_VARIABLES = ("PULUMI_PROJECT", "PULUMI_STACK", "PULUMI_DRY_RUN")


@functools.lru_cache(maxsize=4)
def _parsed_config(text: str) -> tuple[tuple[str, Any], ...]:
    # The text is the key: a process whose environment changed (a test) reads the new one.
    return tuple(json.loads(text).items())


@functools.lru_cache(maxsize=1)
def _takes_organization() -> bool:
    return "organization" in signature(pulumi.runtime.Settings).parameters


def configure_runtime_settings(_servicer: Any = None) -> None:
    """What the SDK's `_configure_runtime_settings` does, step for step, with the config's JSON and the signature of
    `Settings` read once: every config key set, then the settings applied when the CLI gave project, stack and dry
    run."""
    text = os.environ.get("PULUMI_CONFIG")
    for key, value in _parsed_config(text) if text is not None else ():
        pulumi.runtime.set_config(key, value)
    if all(name in os.environ for name in _SETTINGS_VARIABLES):
        settings_args: dict[str, Any] = {
            "project": os.environ["PULUMI_PROJECT"],
            "stack": os.environ["PULUMI_STACK"],
            "dry_run": os.environ["PULUMI_DRY_RUN"] == "true",
        }
        if _takes_organization():
            # PULUMI_ORGANIZATION might not be set for filestate backends (the SDK's own default).
            settings_args["organization"] = os.environ.get("PULUMI_ORGANIZATION", "organization")
        pulumi.runtime.configure(pulumi.runtime.Settings(**settings_args))


def read_environment_once() -> None:
    """Make the SDK's servicer configure each call by `configure_runtime_settings` (not with
    `POLICY_PACK_DECODE_EACH=1`, which leaves the SDK as it is for the benchmark's comparison: decoding.py)."""
    if sdk_as_is():
        return
    setattr(sdk._PolicyAnalyzerServicer, "_configure_runtime_settings", configure_runtime_settings)
