"""The previous release of every model, for the policy pack's `canary-weight-steps` rule.

The analyzer protocol hands a policy the new resources only, so the release each model had
before this change reaches the pack through its policy config, `previousReleases`: each model's
release record in its output form (platform_config/release.py `to_output`). Read here from

- a baseline preview's resources.json (the release annotations of each model's VirtualService);
- a previous stack file (its `<project>:models`, tolerant of older shapes: `canaryWeight` or
  `weights`, no `steps`);
- the program's `canaryReleases` output, in CI before `pulumi up`:

      pulumi stack output --json --stack org/prod > outputs.json
      python -m preview.previous_releases --from-outputs outputs.json > policy-config.json

  which prints the policy config to pass as `--policy-pack-config` (`{}` when the stack has no
  `canaryReleases` output yet, e.g. before its first deployment with this rule: nothing to compare).

Each is read by the record's own readers (`from_annotations`, `from_output`), which refuse what the pack would.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from platform_config.models import ModelSource, weights_location
from platform_config.release import Release, ReleaseRecordError, from_annotations, from_output, to_output

from .stack_config import StackConfigError, read_bounded, read_yaml_file

# The policies that read `previousReleases` (policies/inference_governance/pack.py).
POLICIES = ("canary-weight-steps", "canary-step-override")
CONFIG_KEY = "previousReleases"
OUTPUT_NAME = "canaryReleases"
PROJECT = "inference-platform"
VIRTUAL_SERVICE = "kubernetes:networking.istio.io/v1:VirtualService"
MAX_OUTPUTS_BYTES = 16 << 20

Releases = dict[str, Release]


def from_baseline(resources: list[dict[str, Any]]) -> Releases | None:
    """Each model's release as a baseline preview's VirtualServices declare it; None when none
    declares one (a baseline from before the routes carried their release)."""
    releases: Releases = {}
    for resource in resources:
        if resource.get("type") != VIRTUAL_SERVICE:
            continue
        metadata = (resource.get("inputs") or {}).get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        name = metadata.get("name")
        if not isinstance(annotations, Mapping) or not isinstance(name, str):
            continue
        try:
            release = from_annotations(annotations)
        except ReleaseRecordError as error:
            raise StackConfigError(f"the baseline's VirtualService {name}: its release cannot be read: {error}") from None
        if release is not None:
            releases[name] = release
    return releases or None


def _stack_file_entry(release: Mapping[str, Any]) -> dict[str, Any]:
    """A stack file's release block (or an adapter's) as the record's output form reads it: the weight from
    `canaryWeight` or an older file's `weights`, the step override's reason."""
    entry = {key: release[key] for key in ("stable", "canary", "steps") if key in release}
    weights = release.get("weights")
    if isinstance(weights, Mapping):
        canary = release.get("canary")
        entry["canaryWeight"] = weights.get(canary, 0) if isinstance(canary, str) else 0
    else:
        entry["canaryWeight"] = release.get("canaryWeight", 0)
    override = release.get("stepOverride")
    if override is not None:
        entry["stepOverride"] = override.get("reason") if isinstance(override, Mapping) else override
    return entry


def _with_served(release: Release, served: Mapping[str, str]) -> Release:
    """The release with the weights each of its versions serves, as their sources name them (`_served`)."""
    canary_weights = None if release.canary is None else served.get(release.canary)
    return replace(release, stable_weights=served.get(release.stable), canary_weights=canary_weights)


def _stack_file_release(model: Mapping[str, Any], release: Mapping[str, Any], where: str) -> Release:
    """A stack file's model's release, with the releases of its adapters that have revisions (an adapter's `versions`
    are shaped like a model's; its steps and override are its model's) and the weights each version serves."""
    adapters: dict[str, Mapping[str, Any]] = {}
    for adapter in model.get("adapters") or []:
        if isinstance(adapter, Mapping) and isinstance(adapter.get("name"), str) and isinstance(adapter.get("release"), Mapping):
            adapters[adapter["name"]] = adapter
    entry = {
        **_stack_file_entry(release),
        "adapters": {
            name: {k: v for k, v in _stack_file_entry(adapter["release"]).items() if k not in ("steps", "stepOverride")}
            for name, adapter in adapters.items()
        },
    }
    parsed = from_output(entry, where)
    served = {name: _with_served(one, _served(adapters[name])) for name, one in (parsed.adapters or {}).items()}
    return replace(_with_served(parsed, _served(model)), adapters=served)


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
        if not isinstance(release, Mapping):
            continue
        try:
            releases[model["name"]] = _stack_file_release(model, release, f"models[{model['name']}].release")
        except ReleaseRecordError as error:
            raise StackConfigError(f"the previous stack file {path}: {error}") from None
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
        where = f"{OUTPUT_NAME}.{name}"
        try:
            out[name] = from_output(release, where)
        except ReleaseRecordError as error:
            shape = "{stable, canary, canaryWeight}"
            raise StackConfigError(f"the stack output {where} is not a release {shape}: {error}") from None
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
            merged[policy] = {**current, CONFIG_KEY: {name: to_output(release) for name, release in releases.items()}}
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
