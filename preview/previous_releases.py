"""The previous release of every model, for the policy pack's `canary-weight-steps` rule.

The analyzer protocol hands a policy the new resources only, so the release each model had
before this change reaches the pack through its policy config, `previousReleases`:
{model: {stable, canary, canaryWeight, steps, adapters: {adapter: {stable, canary, canaryWeight}}}}.
Read here from

- a baseline preview's resources.json (the release annotations of each model's VirtualService);
- a previous stack file (its `<project>:models`, tolerant of older shapes: `canaryWeight` or
  `weights`, no `steps`);
- the program's `canaryReleases` output, in CI before `pulumi up`:

      pulumi stack output --json --stack org/prod > outputs.json
      python -m preview.previous_releases --from-outputs outputs.json > policy-config.json

  which prints the policy config to pass as `--policy-pack-config` (`{}` when the stack has no
  `canaryReleases` output yet, e.g. before its first deployment with this rule: nothing to compare).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from components.specs.routes import (
    ADAPTER_RELEASES_ANNOTATION,
    CANARY_STEP_OVERRIDE_ANNOTATION,
    CANARY_STEPS_ANNOTATION,
    CANARY_VERSION_ANNOTATION,
    CANARY_WEIGHT_ANNOTATION,
    CANARY_WEIGHTS_ANNOTATION,
    STABLE_VERSION_ANNOTATION,
    STABLE_WEIGHTS_ANNOTATION,
)
from platform_config.models import ModelSource, ReleaseConfig, weights_location

from .stack_config import StackConfigError, read_bounded, read_yaml_file

DEFAULT_CANARY_STEPS: list[int] = ReleaseConfig.model_fields["steps"].default

# The policies that read `previousReleases` (policies/inference_governance/pack.py).
POLICIES = ("canary-weight-steps", "canary-step-override")
CONFIG_KEY = "previousReleases"
OUTPUT_NAME = "canaryReleases"
PROJECT = "inference-platform"
VIRTUAL_SERVICE = "kubernetes:networking.istio.io/v1:VirtualService"
MAX_OUTPUTS_BYTES = 16 << 20

Releases = dict[str, dict[str, Any]]


def _weight(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and 0 <= value <= 100:
        return value
    if isinstance(value, str) and value.isdigit() and int(value) <= 100:
        return int(value)
    return None


def _steps(value: Any) -> list[int] | None:
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, list) or not value:
        return None
    steps = [_weight(step.strip() if isinstance(step, str) else step) for step in value]
    return [s for s in steps if s is not None] if all(s is not None and s > 0 for s in steps) else None


def release_entry(
    stable: Any,
    canary: Any,
    weight: Any,
    steps: Any = None,
    stable_weights: Any = None,
    canary_weights: Any = None,
    step_override: Any = None,
) -> dict[str, Any] | None:
    """One `previousReleases` entry, or None when `stable` is no version name."""
    if not isinstance(stable, str) or not stable:
        return None
    entry: dict[str, Any] = {
        "stable": stable,
        "canary": canary if isinstance(canary, str) and canary else None,
        "canaryWeight": _weight(weight) or 0,
    }
    # A release without steps has the config's defaults (what the program applied to it).
    entry["steps"] = _steps(steps) or list(DEFAULT_CANARY_STEPS)
    for key, text in (("stableWeights", stable_weights), ("canaryWeights", canary_weights), ("stepOverride", step_override)):
        if isinstance(text, str) and text:
            entry[key] = text
    return entry


def _adapter_entries(recorded: Any) -> dict[str, Any] | None:
    """The adapters' releases a route annotation (JSON) or a `canaryReleases` entry records, by
    adapter name; None when none is recorded (a release from before adapters' were)."""
    if isinstance(recorded, str):
        try:
            recorded = json.loads(recorded)
        except ValueError:
            return None
    if not isinstance(recorded, Mapping):
        return None
    adapters: dict[str, Any] = {}
    for name, release in recorded.items():
        entry = _from_release(release) if isinstance(release, Mapping) else None
        if entry is not None:
            adapters[str(name)] = _adapter_release(entry)
    return adapters


def _adapter_release(entry: dict[str, Any]) -> dict[str, Any]:
    """A release entry as an adapter's: it goes through its model's steps, under its model's override."""
    return {k: v for k, v in entry.items() if k not in ("steps", "stepOverride")}


def _with_adapters(entry: dict[str, Any] | None, adapters: dict[str, Any] | None) -> dict[str, Any] | None:
    if entry is not None and adapters is not None:
        entry["adapters"] = adapters
    return entry


def from_baseline(resources: list[dict[str, Any]]) -> Releases | None:
    """Each model's release as a baseline preview's VirtualServices declare it; None when none
    declares one (a baseline from before the routes carried their release)."""
    releases: Releases = {}
    for resource in resources:
        if resource.get("type") != VIRTUAL_SERVICE:
            continue
        metadata = (resource.get("inputs") or {}).get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        if not isinstance(annotations, Mapping) or STABLE_VERSION_ANNOTATION not in annotations:
            continue
        entry = release_entry(
            annotations.get(STABLE_VERSION_ANNOTATION),
            annotations.get(CANARY_VERSION_ANNOTATION),
            annotations.get(CANARY_WEIGHT_ANNOTATION, "0"),
            annotations.get(CANARY_STEPS_ANNOTATION),
            annotations.get(STABLE_WEIGHTS_ANNOTATION),
            annotations.get(CANARY_WEIGHTS_ANNOTATION),
            annotations.get(CANARY_STEP_OVERRIDE_ANNOTATION),
        )
        entry = _with_adapters(entry, _adapter_entries(annotations.get(ADAPTER_RELEASES_ANNOTATION)))
        if entry is not None and isinstance(metadata.get("name"), str):
            releases[metadata["name"]] = entry
    return releases or None


def _from_release(release: Mapping[str, Any], served: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """An entry from a release block (a stack file's, with `served`: each version's weights as
    its source names them) or a `canaryReleases` output entry (which records them)."""
    canary = release.get("canary")
    weight: Any = release.get("canaryWeight", 0)
    weights = release.get("weights")
    if isinstance(weights, Mapping):
        weight = weights.get(canary, 0) if isinstance(canary, str) else 0
    stable = release.get("stable")
    if served is not None:
        stable_weights = served.get(stable) if isinstance(stable, str) else None
        canary_weights = served.get(canary) if isinstance(canary, str) else None
    else:
        stable_weights, canary_weights = release.get("stableWeights"), release.get("canaryWeights")
    override = release.get("stepOverride")
    if isinstance(override, Mapping):  # a stack file's {reason}; an output entry records the reason itself
        override = override.get("reason")
    entry = release_entry(stable, canary, weight, release.get("steps"), stable_weights, canary_weights, override)
    return entry if served is not None else _with_adapters(entry, _adapter_entries(release.get("adapters")))


def _stack_file_adapters(model: Mapping[str, Any]) -> dict[str, Any]:
    """The releases of a stack file's model's adapters that have revisions, with the weights each revision's source
    names (an adapter's `versions` are shaped like a model's)."""
    adapters: dict[str, Any] = {}
    for adapter in model.get("adapters") or []:
        if not isinstance(adapter, Mapping) or not isinstance(adapter.get("name"), str):
            continue
        release = adapter.get("release")
        entry = _from_release(release, _served(adapter)) if isinstance(release, Mapping) else None
        if entry is not None:
            adapters[adapter["name"]] = _adapter_release(entry)
    return adapters


def _served(model: Mapping[str, Any]) -> dict[str, str]:
    """Each version's weights as a stack file's pinned source names them (hf:// or s3://); a
    registry reference says nothing here (only the registry resolves it)."""
    served: dict[str, str] = {}
    for version in model.get("versions") or []:
        source = version.get("source") if isinstance(version, Mapping) else None
        if not isinstance(source, Mapping) or not isinstance(version.get("name"), str):
            continue
        try:
            location = weights_location(ModelSource.model_validate(source, by_alias=True, by_name=False))
        except ValueError:
            location = None  # not a source this program reads: nothing to compare
        if location is not None:
            served[version["name"]] = location
    return served


def from_stack_file(path: Path, project: str = PROJECT) -> Releases:
    """Each model's release in a previous stack file (raw YAML: `config: <project>:models`)."""
    document = read_yaml_file(path)
    config = document.get("config") if isinstance(document, Mapping) else None
    models = config.get(f"{project}:models") if isinstance(config, Mapping) else None
    if not isinstance(models, list):
        raise StackConfigError(f"the previous stack file {path} has no `config: {project}:models` list")
    releases: Releases = {}
    for model in models:
        if not isinstance(model, Mapping) or not isinstance(model.get("name"), str):
            continue
        release = model.get("release")
        entry = _from_release(release, _served(model)) if isinstance(release, Mapping) else None
        if entry is not None:
            releases[model["name"]] = {**entry, "adapters": _stack_file_adapters(model)}
    return releases


def from_outputs(outputs: Any) -> Releases | None:
    """The `canaryReleases` output among a stack's outputs (`pulumi stack output --json`); None
    when the stack has none yet."""
    if not isinstance(outputs, Mapping):
        raise StackConfigError("the stack outputs are not a JSON object")
    releases = outputs.get(OUTPUT_NAME)
    if releases is None:
        return None
    if not isinstance(releases, Mapping):
        raise StackConfigError(f"the stack output {OUTPUT_NAME} is not an object keyed by model")
    out: Releases = {}
    for name, release in releases.items():
        entry = _from_release(release) if isinstance(release, Mapping) else None
        if entry is None:
            raise StackConfigError(f"the stack output {OUTPUT_NAME}.{name} is not a release {{stable, canary, canaryWeight}}")
        out[name] = entry
    return out


def previous_releases(baseline_resources: list[dict[str, Any]] | None, previous_stack_file: Path | None) -> Releases | None:
    """The previous releases from a baseline preview's resources and/or a previous stack file (the
    stack file, named explicitly, wins for the models both know); None when neither says anything."""
    releases: Releases = {}
    if baseline_resources is not None:
        releases.update(from_baseline(baseline_resources) or {})
    if previous_stack_file is not None:
        releases.update(from_stack_file(previous_stack_file))
    if not releases and previous_stack_file is None:
        return None
    return releases


def with_previous_releases(overrides: dict[str, Any], releases: Releases | None) -> dict[str, Any]:
    """The policy config with `previousReleases` given to the policies that read it, unless it is
    None or the user's policy config sets it already (the user's wins)."""
    if releases is None:
        return overrides
    merged = dict(overrides)
    for policy in POLICIES:
        current = merged.get(policy, {})
        if isinstance(current, str):
            current = {"enforcementLevel": current}
        if isinstance(current, dict) and CONFIG_KEY not in current:
            merged[policy] = {**current, CONFIG_KEY: releases}
    return merged


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m preview.previous_releases",
        description="Print the policy config giving the pack each model's previous release.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--from-outputs", type=Path, help="`pulumi stack output --json` of the stack's last deployment")
    source.add_argument("--from-stack-file", type=Path, help="the previous stack file")
    parser.add_argument("--policy-config", type=Path, help="a policy config to add previousReleases to")
    args = parser.parse_args(argv)
    try:
        overrides: dict[str, Any] = {}
        if args.policy_config is not None:
            overrides = json.loads(read_bounded(args.policy_config, MAX_OUTPUTS_BYTES, "a policy config is small"))
            if not isinstance(overrides, dict):
                raise StackConfigError(f"the policy config {args.policy_config} is not a JSON object")
        if args.from_outputs is not None:
            releases = from_outputs(json.loads(read_bounded(args.from_outputs, MAX_OUTPUTS_BYTES, "stack outputs are small")))
        else:
            releases = from_stack_file(args.from_stack_file)
    except (StackConfigError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(with_previous_releases(overrides, releases), indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
