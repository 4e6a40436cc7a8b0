# Long module: the preview's one entry point: its flags, every stage in order and the exit code each failure gets.
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
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pulumi

from platform_config.registry import RECORDING_NAME, REGISTRY_FILE_ENV

from . import render
from .admission import admit_and_schedule
from .deploy_policy import DEPLOY_POLICY_FILE, UnmappedTypes, deploying_identity_policy
from .diff import diff_resources
from .engine import DuplicateUrnError, Evaluation, ExportListener, RecordedResource
from .evaluation_process import ProgramCrashed, evaluate_apart
from .first_up import check_first_up
from .inputs import (
    STACK_NAME,
    baseline_performance,
    check_registry_file,
    check_stack_name,
    image_digests_offline,
    previous_output,
    previous_outputs,
    previous_posture,
    read_inputs,
)
from .performance import PACK_CONFIG_FILE, pack_config, performance_section
from .performance_prediction import PLOT_FILE, Prediction, worker_idle_seconds
from .placeholders import placeholder_section
from .policy_runner import PolicyConfigError, PolicyPack, PolicyPackError, PolicyRun
from .policy_session import PolicySession
from .progress import Progress
from .registry_resolution import ProgramEnvironment, committed_lock, program_config, write_recording
from .report import PROJECT_ROOT, Report, Section, shown_path, shown_paths
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
from .stack_config import StackConfig, StackConfigError, load_project, load_stack_config
from .upstream import check_upstream, facts_dir

EXIT_CLEAN, EXIT_FINDINGS, EXIT_CONFIG, EXIT_CRASH = 0, 1, 2, 3


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


# The stack outputs the run reads besides the sections' own: the security posture and the cost (compared with the
# previous outputs'), and the servers' shapes (what aiconfigurator is asked about).
POSTURE_OUTPUT = "securityPosture"
COST_OUTPUT = "costPerHour"
SHAPES_OUTPUT = "servingShapes"


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
    if out.is_file() or out.parent.is_file() or not STACK_NAME.fullmatch(stack) or stack in (".", ".."):
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
        check_stack_name(args.stack)
        if args.out is None:
            _clear_verdict(out)
        overrides, baseline = read_inputs(args)
        previous = previous_outputs(args)
        posture = previous_posture(previous, POSTURE_OUTPUT)
        previous_cost, _ = previous_output(previous, COST_OUTPUT)
        args.registry_file = check_registry_file(args.registry_file)
        args.worker_idle_seconds = worker_idle_seconds()
        project = load_project(project_dir)
        stack_config = progress.run("reading stack config", lambda: load_stack_config(project, args.stack, args.config_file))
        if args.registry_file is not None and args.registry_live:
            raise StackConfigError("--registry-file and --registry-live: give one (a recording, or the live registry)")
        # A recording named in the environment (the program's own variable) wins over the lock, as it would under the
        # program alone; --registry-live over both.
        if args.registry_file is None and not args.registry_live and not os.environ.get(REGISTRY_FILE_ENV):
            args.registry_file = committed_lock(project_dir, stack_config)
        preview_levels = image_digests_offline(overrides, stack_config)
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
    policies = PolicySession(pack, project_dir, stack_config, overrides, preview_levels)
    # aiconfigurator's answer, read back or asked for once the program has exported its servers.
    prediction = Prediction.of_perf_venv(args.worker_idle_seconds)
    try:
        return _run(
            args, project_dir, out, progress, project.name, stack_config, policies, prediction, baseline, posture, previous_cost
        )
    finally:
        prediction.stop()
        policies.close()


class _Stopped(Exception):
    """A stage ended the run, having said why on stderr: the preview exits with `code`."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


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
    """The stages after the stack's config is read, in order, each adding its sections to the report."""
    try:
        # aiconfigurator predicts in its own process from the moment the program exports its servers.
        evaluation = _evaluate(args, project_dir, out, progress, stack_config, policies, prediction.on_export(SHAPES_OUTPUT))
        progress.add_cpu(evaluation.program_cpu_seconds)
        outputs = evaluation.stack_outputs
        # The pack checks the whole stack on its own core while this process renders and validates.
        policies.analyze_stack(evaluation.resources)
        report = Report(project=project, stack=args.stack, resources=evaluation.resources, stack_outputs=outputs)
        # The servers as the program's outputs resolved them: the request already sent, unless it exported none.
        shapes = outputs.get(SHAPES_OUTPUT) or {}
        prediction.send(shapes.get("servers"))
        rendered = _render(progress, out, evaluation.resources)
        recorded = _exported_sections(report, outputs, out)
        _object_checks(report, progress, evaluation, rendered)
        verdict = _policy_verdict(progress, policies)
        report.sections["policies"], report.cpu = policy_section(verdict), dict(verdict.cpu_seconds)
        report.cpu["program"] = round(evaluation.program_cpu_seconds, 3)
        _comparisons(report, stack_config, outputs, posture, previous_cost)
        performance = progress.run(
            "predicting memory, latency and cost per server (aiconfigurator)",
            lambda: performance_section(
                shapes.get("servers"),
                prediction,
                args.performance_level or ("mandatory" if shapes.get("production") else "advisory"),
                baseline_performance(args.baseline),
                out,
            ),
        )
        if performance is not None:
            report.sections["performance"] = performance
        if baseline is not None:
            diff = diff_resources(baseline, render.resource_entries(evaluation.resources))
            report.sections["changes"] = changes_section(diff, shown_path(args.baseline))
        deploy_policy = _deploy_policy(evaluation.resources)
    except _Stopped as stopped:
        return stopped.code
    _write_results(args, out, report, progress, performance, deploy_policy, recorded)
    return EXIT_FINDINGS if report.failed else EXIT_CLEAN


def _evaluate(
    args,
    project_dir: Path,
    out: Path,
    progress: Progress,
    stack_config: StackConfig,
    policies: PolicySession,
    exported: ExportListener,
) -> Evaluation:
    """The program under the mock engine, the pack hearing of each resource as it is registered (and `exported` of
    each stack output as it is exported), with the registry's recording (or lock file) named in the program's
    environment."""
    recording_file = str(args.registry_file) if args.registry_file else "" if args.registry_live else None
    environment = ProgramEnvironment({REGISTRY_FILE_ENV: recording_file} if recording_file is not None else {})
    try:
        with environment:
            return progress.run(
                "evaluating the program under the mock engine (the policy pack analyzing alongside)",
                lambda: evaluate_apart(project_dir, program_config(stack_config), policies, exported),
            )
    except pulumi.RunError as error:
        # The same clean message the Pulumi CLI prints for a RunError: no traceback.
        print(f"error: {error}", file=sys.stderr)
        if args.report_errors:
            _write_error_report(out, args.stack, str(error))
        raise _Stopped(EXIT_CONFIG) from None
    except DuplicateUrnError as error:
        # The config checks refuse names that would collide: one reaching the engine is a bug.
        print(f"error: {error}", file=sys.stderr)
        raise _Stopped(EXIT_CRASH) from None
    except ProgramCrashed as crash:
        # The program's traceback, as its process formatted it.
        print(crash.trace, end="", file=sys.stderr)
        print("error: the program crashed (a bug, not a config problem)", file=sys.stderr)
        raise _Stopped(EXIT_CRASH) from None


def _render(progress: Progress, out: Path, resources: list[RecordedResource]) -> render.Rendered:
    """resources.json and manifests/ written; the Kubernetes objects and the Helm releases, for the checks."""
    try:
        return progress.run("rendering resources and manifests", lambda: render.render(out, resources))
    except render.DuplicateObjectError as error:
        print(f"error: {error}", file=sys.stderr)
        raise _Stopped(EXIT_CRASH) from None


def _exported_sections(report: Report, outputs: dict[str, Any], out: Path) -> bool:
    """The sections of the tables the program exports; whether a live registry resolution was recorded."""
    report.sections["capacity"] = capacity_section(outputs)
    report.sections["coldStart"] = cold_start_section(outputs)
    adapters = outputs.get("loraAdapters")
    if adapters:
        report.sections["adapters"] = adapters_section(adapters)
    queue_bounds = queue_bound_section(outputs)
    if queue_bounds is not None:
        report.sections["queueBounds"] = queue_bounds
    batch_queues = batch_queue_section(outputs)
    if batch_queues is not None:
        report.sections["batchQueues"] = batch_queues
    registry = outputs.get("modelRegistry")
    if registry is None:
        return False
    report.sections["registry"] = registry_section(registry)
    return write_recording(out, registry)


def _object_checks(report: Report, progress: Progress, evaluation: Evaluation, rendered: render.Rendered) -> None:
    """The rendered objects through admission and scheduling, the first `up`'s order, the upstream facts and the
    schemas."""
    outputs, objects, releases = evaluation.stack_outputs, rendered.objects, rendered.releases
    admission = progress.run(
        "admitting and scheduling every pod template (LimitRange, quota, Pod Security, Knative, pools)",
        lambda: admit_and_schedule(objects, outputs.get("nodePools") or [], outputs.get("serverPeaks") or []),
    )
    report.sections["admission"] = admission_section(admission)
    first_up = progress.run(
        "ordering the first `up` against every webhook and CRD the installers register",
        lambda: check_first_up(evaluation.resources, rendered.api_inputs),
    )
    report.sections["firstUp"] = first_up_section(first_up)
    pins = progress.run(
        "checking pins and rendered values against upstream facts",
        lambda: check_upstream(objects, releases, production=bool((outputs.get("securityPosture") or {}).get("production"))),
    )
    # Named relative to the project (`../shared/upstream-facts`): a pull request's report, where the runner's paths say nothing.
    report.sections["upstream"] = upstream_section(pins, shown_path(facts_dir()))
    version = str(outputs.get("kubernetesVersion") or "1.33")
    # Imported only now: jsonschema and the schemas load while the policy pack is busy with the
    # stack, not before the program can start.
    from .schemas import SchemaValidator, crd_schema_dir

    crd_dir = crd_schema_dir()
    results = progress.run("validating objects against schemas", lambda: SchemaValidator(version, crd_dir).validate_all(objects))
    report.sections["schemas"] = schema_section(results, version, shown_path(crd_dir))


def _policy_verdict(progress: Progress, policies: PolicySession) -> PolicyRun:
    try:
        return progress.run("waiting for the policy pack's verdict (analyzer protocol)", policies.result)
    except PolicyConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        raise _Stopped(EXIT_CONFIG) from None
    except (PolicyPackError, grpc.RpcError) as error:
        # The pack itself failed (not a violation): say so, with what it printed.
        detail = error.details() if isinstance(error, grpc.RpcError) else str(error)
        print(f"error: the policy pack failed: {detail}", file=sys.stderr)
        raise _Stopped(EXIT_CRASH) from None


def _comparisons(
    report: Report,
    stack_config: StackConfig,
    outputs: dict[str, Any],
    posture: tuple[Any, str],
    previous_cost: dict[str, Any] | None,
) -> None:
    """The guard rails against the previous security posture, the placeholders left in the stack file, and the cost
    beside the previous one."""
    previous_posture, posture_source = posture
    guard_rails = guard_rail_section(previous_posture, outputs.get(POSTURE_OUTPUT), posture_source)
    if guard_rails is not None:
        report.sections["guardRails"] = guard_rails
    report.sections["placeholders"] = placeholder_section(stack_config.values, stack_config.secret_keys)
    cost = cost_section(outputs.get(COST_OUTPUT), previous_cost)
    if cost is not None:
        report.sections["cost"] = cost


def _deploy_policy(resources: list[RecordedResource]) -> dict[str, Any] | None:
    try:
        return deploying_identity_policy(r.type for r in resources)
    except UnmappedTypes as error:
        print(f"error: {error}", file=sys.stderr)
        raise _Stopped(EXIT_CRASH) from None


def _write_results(
    args,
    out: Path,
    report: Report,
    progress: Progress,
    performance: Section | None,
    deploy_policy: dict[str, Any] | None,
    recorded: bool,
) -> None:
    """The deploying identity's policy, the pack's config for `pulumi up` and the report written; the summary (or
    report.json, with --json) printed."""
    if deploy_policy is not None:
        (out / DEPLOY_POLICY_FILE).write_text(json.dumps(deploy_policy, indent=2) + "\n")
    (out / PACK_CONFIG_FILE).write_text(
        json.dumps(pack_config(performance, args.performance_level), indent=2, sort_keys=True) + "\n"
    )
    report.stages = progress.stages
    report.cpu["preview"] = round(time.process_time(), 3)
    report.write(out)
    if args.json:
        print(json.dumps(report.to_json(), indent=2, default=str))
    else:
        print(report.terminal())
        extra = [DEPLOY_POLICY_FILE] * bool(deploy_policy) + [PLOT_FILE] * bool(performance and performance.data.get("plotted"))
        written = ", ".join(["resources.json, manifests/, report.json, report.md", PACK_CONFIG_FILE, *extra])
        print(f"\nwrote {out}/{written}{', ' + RECORDING_NAME if recorded else ''}")
