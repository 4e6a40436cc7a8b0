"""The preview's inputs besides the stack, each checked before anything runs: the stack's name, the policy config,
the baseline preview and the previous outputs it is compared with, and the registry recording it resolves from.
Each refusal is a StackConfigError (exit 2)."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from platform_config.guard_rails import posture_problem
from platform_config.models import PROJECT
from platform_config.registry import RECORDING_NAME

from .performance import PERFORMANCE_POLICY, performance_level, preview_policy_config
from .policy_runner import check_policy_config
from .previous_releases import previous_releases, with_previous_releases
from .report import shown_path
from .stack_config import StackConfig, StackConfigError, read_bounded

# A policy config or a baseline's resources.json: large for a JSON file, small for memory.
MAX_JSON_BYTES = 16 << 20
# Pulumi's rule for a stack name (pulumi/pulumi pkg/backend/filestate ValidateStackName:
# `^[A-Za-z0-9_.-]{1,100}$`, "alphanumeric, hyphens, underscores, or periods");
# the name also becomes a file name and the default output folder, so no path may hide in it.
STACK_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")


def check_stack_name(stack: str) -> None:
    if not STACK_NAME.fullmatch(stack):
        raise StackConfigError(
            f"--stack {stack!r} is not a stack name: letters, digits, '-', '_' and '.', at most 100 characters"
        )


def read_json(path: Path, what: str) -> Any:
    try:
        data = read_bounded(path, MAX_JSON_BYTES, "more than a preview's resources.json ever holds")
    except StackConfigError as error:
        raise StackConfigError(f"{what}: {error}") from None
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        reason = "nested too deeply" if isinstance(error, RecursionError) else error
        raise StackConfigError(f"cannot read {what} {path}: {reason}") from None


def check_baseline(baseline: Any, source: Path) -> list[dict[str, Any]]:
    """A baseline is what a preview wrote as resources.json: a list of {urn, type, name, inputs}."""
    if not isinstance(baseline, list):
        raise StackConfigError(f"baseline {source}: resources.json holds {type(baseline).__name__}, not a list of resources")
    for index, entry in enumerate(baseline):
        fields = ("urn", "type", "name")
        if not isinstance(entry, dict) or not all(isinstance(entry.get(key), str) for key in fields):
            raise StackConfigError(f"baseline {source}: resources.json[{index}] is not a resource with urn, type and name")
        if not isinstance(entry.get("inputs"), dict):
            raise StackConfigError(f"baseline {source}: resources.json[{index}].inputs is not a mapping")
    return baseline


def previous_outputs(args: argparse.Namespace) -> tuple[dict[str, Any] | None, str]:
    """The stack outputs this run is compared with, and where they were read: `--previous-outputs` (a deployed
    stack's outputs), else `--baseline`'s report.json; (None, why) when neither holds them."""
    if args.previous_outputs is not None:
        source, what = args.previous_outputs, "the previous outputs"
        outputs = read_json(source, what)
    elif args.baseline is not None:
        source, what = args.baseline / "report.json", "the baseline's report"
        if not source.is_file():
            return None, f"{shown_path(source)} does not exist"
        report = read_json(source, what)
        outputs = report.get("stackOutputs") if isinstance(report, dict) else None
    else:
        return None, "no --baseline or --previous-outputs"
    if not isinstance(outputs, dict):
        raise StackConfigError(f"{what} {source}: holds {type(outputs).__name__}, not the stack's outputs (a mapping)")
    return outputs, shown_path(source)


def previous_output(outputs: tuple[dict[str, Any] | None, str], key: str) -> tuple[dict[str, Any] | None, str]:
    """One mapping among the previous outputs, and where it was read; (None, why) when they have none (a first
    deployment, or a baseline from before the program exported it)."""
    values, source = outputs
    if values is None:
        return None, source
    value = values.get(key)
    if value is None:
        return None, f"{source} has no {key}"
    if not isinstance(value, dict):
        raise StackConfigError(f"{source}: {key} is {type(value).__name__}, not a mapping")
    return value, source


def previous_posture(outputs: tuple[dict[str, Any] | None, str], key: str) -> tuple[dict[str, Any] | None, str]:
    """The previous security posture (`key` among the previous outputs) and where it was read, each field it holds
    of the shape the program exports (platform_config/guard_rails.py posture_problem): a posture that is not is
    refused, never read as one that weakens nothing."""
    posture, source = previous_output(outputs, key)
    problem = posture_problem(posture) if posture is not None else None
    if problem is not None:
        raise StackConfigError(f"{source}: {key}.{problem}")
    return posture, source


def read_inputs(args: argparse.Namespace) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
    """Policy config and baseline, checked before anything runs; the Serving performance stage's level, which the
    policy config may set like a policy's (`serving-performance`), goes to `args.performance_level`, not the pack."""
    overrides: dict[str, Any] = {}
    args.performance_level = None
    if args.policy_config is not None:
        overrides = read_json(args.policy_config, "the policy config")
        if isinstance(overrides, dict) and PERFORMANCE_POLICY in overrides:
            args.performance_level = performance_level(overrides.pop(PERFORMANCE_POLICY))
        check_policy_config(overrides)
    overrides = preview_policy_config(overrides)
    baseline = None
    if args.baseline is not None:
        baseline_file = args.baseline / "resources.json"
        baseline = check_baseline(read_json(baseline_file, "the baseline"), baseline_file)
    # What canary-weight-steps holds each model's release to: the release as last deployed.
    overrides = with_previous_releases(overrides, previous_releases(baseline, args.previous_stack_file))
    return overrides, baseline


def baseline_performance(baseline: Path | None) -> list[dict[str, Any]] | None:
    """The Serving performance records of the baseline's report (None without a baseline, or one from before the
    stage existed)."""
    if baseline is None or not (baseline / "report.json").is_file():
        return None
    try:
        section = json.loads((baseline / "report.json").read_text()).get("performance") or {}
    except (OSError, ValueError):
        return None
    servers = (section.get("data") or {}).get("servers")
    return servers if isinstance(servers, list) else None


def check_registry_file(path: Path | None) -> Path | None:
    """The recording `--registry-file` names, made absolute; its content is the program's to check."""
    if path is None:
        return None
    if not path.is_file():
        raise StackConfigError(f"--registry-file {path}: no such file (a live preview writes <out>/{RECORDING_NAME})")
    return path.resolve()


# The pack's rule that production pulls every image by digest (policies/inference_governance/images.py).
IMAGE_DIGESTS_POLICY = "image-digests"


def image_digests_offline(overrides: dict[str, Any], stack_config: StackConfig) -> dict[str, str]:
    """The levels this preview alone sets (policy → why): the pack's image-digests advisory where the stack has no
    image lock and the policy config does not set it. The digests are the registries' answers (`platform_tools
    lock-images`), which a preview offline cannot ask, so it reports every image by tag as a warning; `pulumi up` runs
    the pack's own level (mandatory), and pack-config.json never carries this one."""
    try:
        images = json.loads(stack_config.values.get(f"{PROJECT}:images", "null"))
    except ValueError:
        images = None
    if IMAGE_DIGESTS_POLICY in overrides or (isinstance(images, dict) and images.get("lockFile") is not None):
        return {}
    return {
        IMAGE_DIGESTS_POLICY: "the stack has no image lock (images.lockFile) and a preview offline cannot ask the "
        "registries; `pulumi up` refuses these images until `python -m platform_tools lock-images "
        f"{stack_config.stack}` has locked them"
    }
