"""`python -m preview --stack prod --out build/preview/prod`: the offline preview.

A stack whose versions name MLflow registry versions is resolved from the lock file it names (`registry.lockFile`:
what `pulumi up` may deploy), else against the live registry (`--registry-live` asks it in any case), and a live
resolution is recorded as <out>/registry-resolution.json; `--registry-file` previews from such a recording instead
(offline, e.g. for a pull request). The registry's token, a secret the preview cannot decrypt, comes from the environment variable
INFERENCE_PLATFORM_REGISTRY_TOKEN when the stack declares `registryToken`.

Exit codes: 0 clean; 1 the preview found problems (schema, capacity or mandatory policy
violations); 2 the input is invalid (stack config: one message per offending key, no
traceback; or the policy config / baseline given); 3 something crashed (the program, with its
traceback, or the policy pack).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, TypeVar

import grpc
import pulumi

from platform_config.models import LOCK_FILE_PATTERN, PROJECT, REGISTRY_TOKEN
from platform_config.registry import RECORDING_NAME, REGISTRY_FILE_ENV, REGISTRY_TOKEN_ENV, recording

from . import render
from .admission import admit_and_schedule
from .deploy_policy import DEPLOY_POLICY_FILE, UnmappedTypes, deploying_identity_policy
from .diff import diff_resources
from .engine import DuplicateUrnError, evaluate
from .first_up import check_first_up
from .performance import (
    PACK_CONFIG_FILE,
    PERFORMANCE_POLICY,
    pack_config,
    performance_level,
    performance_section,
    preview_policy_config,
)
from .performance_prediction import PLOT_FILE, Prediction
from .placeholders import placeholder_section
from .policy_runner import PolicyConfigError, PolicyPack, PolicyPackError, check_policy_config
from .policy_session import PolicySession
from .previous_releases import previous_releases, with_previous_releases
from .report import PROJECT_ROOT, Report, shown_path, shown_paths
from .sections import (
    adapters_section,
    admission_section,
    batch_queue_section,
    capacity_section,
    changes_section,
    cold_start_section,
    cost_section,
    first_up_section,
    guard_rail_section,
    policy_section,
    queue_bound_section,
    registry_section,
    schema_section,
    upstream_section,
)
from .stack_config import StackConfig, StackConfigError, load_project, load_stack_config, read_bounded
from .upstream import check_upstream, facts_dir

EXIT_CLEAN, EXIT_FINDINGS, EXIT_CONFIG, EXIT_CRASH = 0, 1, 2, 3

T = TypeVar("T")


class Progress:
    def __init__(self, total: int, quiet: bool):
        self.total, self.index, self.quiet = total, 0, quiet
        self.stages: list[dict[str, float | str]] = []

    def run(self, name: str, step: Callable[[], T]) -> T:
        self.index += 1
        started = time.perf_counter()
        if not self.quiet:
            print(f"[{self.index}/{self.total}] {name} ...", file=sys.stderr, flush=True)
        result = step()
        seconds = time.perf_counter() - started
        self.stages.append({"name": name, "seconds": round(seconds, 4)})
        return result


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m preview", description=__doc__.splitlines()[0])
    parser.add_argument("--stack", default="dev", help="stack name: stacks/Pulumi.<stack>.yaml (default: dev)")
    parser.add_argument("--out", type=Path, help="output directory (default: build/preview/<stack>)")
    parser.add_argument("--project-dir", type=Path, default=PROJECT_ROOT, help="the Pulumi project (default: this repo)")
    parser.add_argument("--config-file", type=Path, help="use this stack file instead of stacks/Pulumi.<stack>.yaml")
    parser.add_argument("--policy-pack", type=Path, help="the policy pack to run (default: <project>/policies)")
    parser.add_argument("--policy-config", type=Path, help="JSON policy config, as for `pulumi preview --policy-pack-config`")
    parser.add_argument(
        "--report-errors",
        action="store_true",
        help="on invalid input (exit 2) still write report.md and report.json, holding the error alone (pull-request CI: "
        "the comment then says why); without it nothing is written",
    )
    parser.add_argument("--baseline", type=Path, help="a previous preview's output directory: report what changes against it")
    parser.add_argument(
        "--previous-stack-file",
        type=Path,
        help="the stack file as last deployed: canary-weight-steps holds each release to it (default: --baseline's routes)",
    )
    parser.add_argument(
        "--previous-outputs",
        type=Path,
        help="the deployed stack's outputs (`pulumi stack output --json`): the guard rails compare its securityPosture "
        "(default: --baseline's report.json)",
    )
    parser.add_argument(
        "--registry-file",
        type=Path,
        help=f"resolve MLflow registry versions from this recording (a live preview's {RECORDING_NAME}) instead of "
        f"the registry; sets {REGISTRY_FILE_ENV} for the program",
    )
    parser.add_argument(
        "--registry-live",
        action="store_true",
        help="ask the registry even where the stack names a lock file (registry.lockFile), which an offline preview "
        "otherwise resolves from: the report then shows every answer the lock does not hold",
    )
    parser.add_argument("--json", action="store_true", help="print report.json on stdout instead of the summary")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return parser.parse_args(argv)


# A policy config or a baseline's resources.json: large for a JSON file, small for memory.
MAX_JSON_BYTES = 16 << 20
# Pulumi's rule for a stack name (pulumi/pulumi pkg/backend/filestate ValidateStackName:
# `^[A-Za-z0-9_.-]{1,100}$`, "alphanumeric, hyphens, underscores, or periods");
# the name also becomes a file name and the default output folder, so no path may hide in it.
_STACK_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")


def _read_json(path: Path, what: str) -> Any:
    try:
        data = read_bounded(path, MAX_JSON_BYTES, "more than a preview's resources.json ever holds")
    except StackConfigError as error:
        raise StackConfigError(f"{what}: {error}") from None
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        reason = "nested too deeply" if isinstance(error, RecursionError) else error
        raise StackConfigError(f"cannot read {what} {path}: {reason}") from None


def _check_baseline(baseline: Any, source: Path) -> list[dict[str, Any]]:
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


POSTURE_OUTPUT = "securityPosture"
COST_OUTPUT = "costPerHour"
SHAPES_OUTPUT = "servingShapes"


def _previous_outputs(args: argparse.Namespace) -> tuple[dict[str, Any] | None, str]:
    """The stack outputs this run is compared with, and where they were read: `--previous-outputs` (a deployed
    stack's outputs), else `--baseline`'s report.json; (None, why) when neither holds them."""
    if args.previous_outputs is not None:
        source, what = args.previous_outputs, "the previous outputs"
        outputs = _read_json(source, what)
    elif args.baseline is not None:
        source, what = args.baseline / "report.json", "the baseline's report"
        if not source.is_file():
            return None, f"{shown_path(source)} does not exist"
        report = _read_json(source, what)
        outputs = report.get("stackOutputs") if isinstance(report, dict) else None
    else:
        return None, "no --baseline or --previous-outputs"
    if not isinstance(outputs, dict):
        raise StackConfigError(f"{what} {source}: holds {type(outputs).__name__}, not the stack's outputs (a mapping)")
    return outputs, shown_path(source)


def _previous_output(outputs: tuple[dict[str, Any] | None, str], key: str) -> tuple[dict[str, Any] | None, str]:
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


def _read_inputs(args: argparse.Namespace) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
    """Policy config and baseline, checked before anything runs; the Serving performance stage's level, which the
    policy config may set like a policy's (`serving-performance`), goes to `args.performance_level`, not the pack."""
    overrides: dict[str, Any] = {}
    args.performance_level = None
    if args.policy_config is not None:
        overrides = _read_json(args.policy_config, "the policy config")
        if isinstance(overrides, dict) and PERFORMANCE_POLICY in overrides:
            args.performance_level = performance_level(overrides.pop(PERFORMANCE_POLICY))
        check_policy_config(overrides)
    overrides = preview_policy_config(overrides)
    baseline = None
    if args.baseline is not None:
        baseline_file = args.baseline / "resources.json"
        baseline = _check_baseline(_read_json(baseline_file, "the baseline"), baseline_file)
    # What canary-weight-steps holds each model's release to: the release as last deployed.
    overrides = with_previous_releases(overrides, previous_releases(baseline, args.previous_stack_file))
    return overrides, baseline


def _baseline_performance(baseline: Path | None) -> list[dict[str, Any]] | None:
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


def _check_registry_file(path: Path | None) -> Path | None:
    """The recording `--registry-file` names, made absolute; its content is the program's to check."""
    if path is None:
        return None
    if not path.is_file():
        raise StackConfigError(f"--registry-file {path}: no such file (a live preview writes <out>/{RECORDING_NAME})")
    return path.resolve()


def committed_lock(project_dir: Path, stack_config: StackConfig) -> Path | None:
    """The lock file the stack names (`registry.lockFile`): what `pulumi up` may deploy, and what an offline preview
    resolves the registry's versions from. None when it names none (or names something the program will refuse)."""
    try:
        registry = json.loads(stack_config.values.get(f"{PROJECT}:registry", "null"))
    except ValueError:
        return None
    lock = registry.get("lockFile") if isinstance(registry, dict) else None
    if not isinstance(lock, str) or not LOCK_FILE_PATTERN.fullmatch(lock) or not (project_dir / lock).is_file():
        return None
    return (project_dir / lock).resolve()


def _program_config(stack_config: StackConfig) -> StackConfig:
    """The config the program gets: the stack's, with the registry token from the environment when the stack
    declares one (still a secret)."""
    key = f"{PROJECT}:{REGISTRY_TOKEN}"
    token = os.environ.get(REGISTRY_TOKEN_ENV)
    if key not in stack_config.secret_keys:
        return stack_config
    if not token:
        print(
            f"note: {key} is a secret this preview cannot decrypt: set {REGISTRY_TOKEN_ENV} to send the registry the token",
            file=sys.stderr,
        )
        return stack_config
    return dataclasses.replace(stack_config, values={**stack_config.values, key: token})


class ProgramEnvironment:
    """The environment variables the program reads, set while it runs in this process and restored after."""

    def __init__(self, variables: dict[str, str]):
        self.variables = variables
        self.saved: dict[str, str | None] = {}

    def __enter__(self) -> None:
        for name, value in self.variables.items():
            self.saved[name] = os.environ.get(name)
            os.environ[name] = value

    def __exit__(self, *exc: object) -> None:
        for name, value in self.saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _write_recording(out: Path, registry: Any) -> bool:
    """A live resolution, recorded for `--registry-file` (an offline preview of the same registry state)."""
    if not isinstance(registry, dict) or registry.get("resolvedFrom") != "live":
        return False
    recorded_at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    (out / RECORDING_NAME).write_text(json.dumps(recording(registry, recorded_at), indent=2) + "\n")
    return True


def _check_stack_name(stack: str) -> None:
    if not _STACK_NAME.fullmatch(stack):
        raise StackConfigError(
            f"--stack {stack!r} is not a stack name: letters, digits, '-', '_' and '.', at most 100 characters"
        )


def _clear_verdict(out: Path) -> None:
    """Remove the previous run's report first: a run that stops early must not leave a clean verdict
    that is not its own (a new report is written only at the very end)."""
    if out.exists() and not out.is_dir():
        raise StackConfigError(f"--out {out} is a file, not a folder")
    for name in ("report.json", "report.md", DEPLOY_POLICY_FILE, PLOT_FILE, PACK_CONFIG_FILE):
        (out / name).unlink(missing_ok=True)


def _write_error_report(out: Path, stack: str, error: str) -> None:
    """With --report-errors, a run refused for its input still leaves a report, so a pull request gets a comment
    saying why: report.md and report.json with the error alone (no resources, manifests or verdict of stages that
    did not run). Not where --out is not a folder one may write, nor for a stack name that is not one (it may name
    the folder)."""
    if out.is_file() or out.parent.is_file() or not _STACK_NAME.fullmatch(stack) or stack in (".", ".."):
        return
    error = shown_paths(error)
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.json").write_text(json.dumps({"stack": stack, "status": "config-error", "error": error}, indent=2) + "\n")
        markdown = [f"# Offline preview: `{stack}`", "", "**Result: config error** (exit 2): nothing was previewed.", ""]
        (out / "report.md").write_text("\n".join([*markdown, "```", error, "```", ""]))
    except OSError:
        pass  # the error itself has been printed


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    project_dir = args.project_dir.resolve()
    out = (args.out or project_dir / "build" / "preview" / args.stack).resolve()
    progress = Progress(total=9, quiet=args.quiet or args.json)

    try:
        # Before anything can fail, so that no earlier verdict outlives this run; a default folder
        # is named after the stack, so that name is checked first.
        if args.out is not None:
            _clear_verdict(out)
        _check_stack_name(args.stack)
        if args.out is None:
            _clear_verdict(out)
        overrides, baseline = _read_inputs(args)
        previous = _previous_outputs(args)
        posture = _previous_output(previous, POSTURE_OUTPUT)
        previous_cost, _ = _previous_output(previous, COST_OUTPUT)
        args.registry_file = _check_registry_file(args.registry_file)
        project = load_project(project_dir)
        stack_config = progress.run("reading stack config", lambda: load_stack_config(project, args.stack, args.config_file))
        if args.registry_file is not None and args.registry_live:
            raise StackConfigError("--registry-file and --registry-live: give one (a recording, or the live registry)")
        # A recording named in the environment (the program's own variable) wins over the lock, as it would under the
        # program alone; --registry-live over both.
        if args.registry_file is None and not args.registry_live and not os.environ.get(REGISTRY_FILE_ENV):
            args.registry_file = committed_lock(project_dir, stack_config)
    except (StackConfigError, PolicyPackError) as error:
        print(f"error: {error}", file=sys.stderr)
        if args.report_errors:
            _write_error_report(out, args.stack, str(error))
        return EXIT_CONFIG

    # The pack starts (and imports its SDK) while the program is evaluated, and analyzes each
    # resource as the program registers it, as under the CLI.
    pack_dir = (args.policy_pack or project_dir / "policies").resolve()
    try:
        pack = PolicyPack(pack_dir, stack_config.values, project.name, args.stack)
    except PolicyPackError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_CRASH
    policies = PolicySession(
        pack, project_dir, project.name, args.stack, stack_config.values, stack_config.secret_keys, overrides
    )
    # aiconfigurator's answer, read back or asked for once the program has exported its servers.
    prediction = Prediction.spawn()
    try:
        return _run(
            args, project_dir, out, progress, project.name, stack_config, policies, prediction, baseline, posture, previous_cost
        )
    finally:
        prediction.stop()
        policies.close()


def _run(
    args,
    project_dir,
    out,
    progress,
    project,
    stack_config,
    policies: PolicySession,
    prediction: Prediction,
    baseline,
    posture: tuple[Any, str],
    previous_cost: dict[str, Any] | None,
) -> int:
    recording_file = str(args.registry_file) if args.registry_file else "" if args.registry_live else None
    environment = ProgramEnvironment({REGISTRY_FILE_ENV: recording_file} if recording_file is not None else {})
    try:
        with environment:
            evaluation = progress.run(
                "evaluating the program under the mock engine (the policy pack analyzing alongside)",
                lambda: evaluate(project_dir, _program_config(stack_config), listener=policies.submit),
            )
    except pulumi.RunError as error:
        # The same clean message the Pulumi CLI prints for a RunError: no traceback.
        print(f"error: {error}", file=sys.stderr)
        if args.report_errors:
            _write_error_report(out, args.stack, str(error))
        return EXIT_CONFIG
    except DuplicateUrnError as error:
        # The config checks refuse names that would collide: one reaching the engine is a bug.
        print(f"error: {error}", file=sys.stderr)
        return EXIT_CRASH
    except Exception:  # noqa: BLE001 - a crash in the program is reported with its traceback
        traceback.print_exc()
        print("error: the program crashed (a bug, not a config problem)", file=sys.stderr)
        return EXIT_CRASH

    # The pack checks the whole stack on its own core while this process renders and validates.
    policies.analyze_stack(evaluation.resources)
    report = Report(project=project, stack=args.stack, resources=evaluation.resources, stack_outputs=evaluation.stack_outputs)
    # aiconfigurator predicts in its own process while the other stages run.
    shapes = evaluation.stack_outputs.get(SHAPES_OUTPUT) or {}
    prediction.send(shapes.get("servers"), out)
    try:
        objects, releases = progress.run(
            "rendering resources and manifests", lambda: render.write_outputs(out, evaluation.resources)
        )
    except render.DuplicateObjectError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_CRASH
    report.sections["capacity"] = capacity_section(evaluation.stack_outputs)
    report.sections["coldStart"] = cold_start_section(evaluation.stack_outputs)
    adapters = evaluation.stack_outputs.get("loraAdapters")
    if adapters:
        report.sections["adapters"] = adapters_section(adapters)
    queue_bounds = queue_bound_section(evaluation.stack_outputs)
    if queue_bounds is not None:
        report.sections["queueBounds"] = queue_bounds
    batch_queues = batch_queue_section(evaluation.stack_outputs)
    if batch_queues is not None:
        report.sections["batchQueues"] = batch_queues
    registry = evaluation.stack_outputs.get("modelRegistry")
    recorded = False
    if registry is not None:
        report.sections["registry"] = registry_section(registry)
        recorded = _write_recording(out, registry)
    admission = progress.run(
        "admitting and scheduling every pod template (LimitRange, quota, Pod Security, Knative, pools)",
        lambda: admit_and_schedule(
            objects, evaluation.stack_outputs.get("nodePools") or [], evaluation.stack_outputs.get("serverPeaks") or []
        ),
    )
    report.sections["admission"] = admission_section(admission)
    first_up = progress.run(
        "ordering the first `up` against every webhook and CRD the installers register",
        lambda: check_first_up(evaluation.resources),
    )
    report.sections["firstUp"] = first_up_section(first_up)
    pins = progress.run("checking pins and rendered values against upstream facts", lambda: check_upstream(objects, releases))
    # Named relative to the project (`../shared/upstream-facts`): the report goes into pull requests,
    # where the runner's own paths say nothing.
    report.sections["upstream"] = upstream_section(pins, shown_path(facts_dir()))
    version = str(evaluation.stack_outputs.get("kubernetesVersion") or "1.33")
    # Imported only now: jsonschema and the schemas load while the policy pack is busy with the
    # stack, not before the program can start.
    from .schemas import SchemaValidator, crd_schema_dir

    crd_dir = crd_schema_dir()
    results = progress.run("validating objects against schemas", lambda: SchemaValidator(version, crd_dir).validate_all(objects))
    report.sections["schemas"] = schema_section(results, version, shown_path(crd_dir))
    try:
        policy_run = progress.run("waiting for the policy pack's verdict (analyzer protocol)", policies.result)
    except PolicyConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_CONFIG
    except (PolicyPackError, grpc.RpcError) as error:
        # The pack itself failed (not a violation): say so, with what it printed.
        detail = error.details() if isinstance(error, grpc.RpcError) else str(error)
        print(f"error: the policy pack failed: {detail}", file=sys.stderr)
        return EXIT_CRASH
    report.sections["policies"] = policy_section(policy_run)
    previous_posture, posture_source = posture
    guard_rails = guard_rail_section(previous_posture, evaluation.stack_outputs.get(POSTURE_OUTPUT), posture_source)
    if guard_rails is not None:
        report.sections["guardRails"] = guard_rails
    report.sections["placeholders"] = placeholder_section(stack_config.values, stack_config.secret_keys)
    cost = cost_section(evaluation.stack_outputs.get(COST_OUTPUT), previous_cost)
    if cost is not None:
        report.sections["cost"] = cost
    performance = progress.run(
        "predicting memory, latency and cost per server (aiconfigurator)",
        lambda: performance_section(
            shapes.get("servers"),
            prediction,
            args.performance_level or ("mandatory" if shapes.get("production") else "advisory"),
            _baseline_performance(args.baseline),
        ),
    )
    if performance is not None:
        report.sections["performance"] = performance
    if baseline is not None:
        diff = diff_resources(baseline, render.resource_entries(evaluation.resources))
        report.sections["changes"] = changes_section(diff, shown_path(args.baseline))

    try:
        deploy_policy = deploying_identity_policy(r.type for r in evaluation.resources)
    except UnmappedTypes as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_CRASH
    if deploy_policy is not None:
        (out / DEPLOY_POLICY_FILE).write_text(json.dumps(deploy_policy, indent=2) + "\n")
    (out / PACK_CONFIG_FILE).write_text(
        json.dumps(pack_config(performance, args.performance_level), indent=2, sort_keys=True) + "\n"
    )
    report.stages = progress.stages
    report.write(out)
    if args.json:
        print(json.dumps(report.to_json(), indent=2, default=str))
    else:
        print(report.terminal())
        written = f"resources.json, manifests/, report.json, report.md, {PACK_CONFIG_FILE}" + (
            f", {DEPLOY_POLICY_FILE}" if deploy_policy else ""
        )
        print(f"\nwrote {out}/{written}{', ' + RECORDING_NAME if recorded else ''}")
    return EXIT_FINDINGS if report.failed else EXIT_CLEAN
