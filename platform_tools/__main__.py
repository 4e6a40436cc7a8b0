"""`python -m platform_tools canary <stack> <model> [--write]`: judge a model's canary from
Prometheus and, with --write, put the next step into its stack file; `step <stack> <model>
promote|rollback|hold`: take that step by hand; `aliases <stack> --deployed <outputs>`: after
`pulumi up`, move the registry's serving aliases to what the stack deployed (platform_tools/aliases.py);
`lock-images <stack>`: ask each image's registry for its digest and write the stack's image lock
(platform_tools/image_digests.py).

Exit codes: 0 a verdict was printed, whichever it is (promote, hold or roll back: read it from
the last lines, or from `--json`'s "verdict", so a pipeline acts on the verdict, not on a
failure; with `--deployed`, also `wait` when the stack file's release is not the one running);
2 the input is bad (unknown stack or model, a model with no canary, a stack file that does not
validate, a bad flag) or Prometheus (or the registry) cannot answer: one message naming the key, flag or
URL, no traceback. The queries: platform_tools/canary.py; the rules: platform_tools/canary_verdict.py.
"""

from __future__ import annotations

import argparse
import contextvars
import dataclasses
import json
import math
import os
import re
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from pulumi.runtime import config as runtime_config

from components.plan import endpoint_picker_plan, plan_checks
from components.specs.endpoint_picker.names import epp_name
from platform_config.errors import ConfigError
from platform_config.loader import parse_platform_config, read_raw_config
from platform_config.models import HOLD_REASON_LENGTH, ModelConfig, PlatformConfig
from platform_config.registry import REGISTRY_TOKEN_ENV, LiveRegistry, RegistryUnusable, in_clear
from platform_config.serving import effective_profile
from preview.previous_releases import MAX_OUTPUTS_BYTES, OUTPUT_NAME, from_outputs
from preview.stack_config import MAX_FILE_BYTES, ProjectFile, StackConfigError, load_project, load_stack_config, read_bounded

from .aliases import REGISTRY_OUTPUT, AliasInputError, move_aliases, wanted_aliases
from .canary import Target, read_metrics
from .canary_report import Report
from .canary_verdict import step_taken, verdict
from .image_digests import ImageLockError, add_lock_images_command, write_image_lock
from .prometheus import PrometheusError, check_url
from .stack_edit import Change, StackEditError, apply_change

EXIT_VERDICT, EXIT_INPUT = 0, 2
PROJECT_ROOT = Path(__file__).resolve().parent.parent
PROMETHEUS_ENV = "PROMETHEUS_URL"
# Pulumi's rule for a stack name, as the preview checks it (preview/inputs.py STACK_NAME).
_STACK_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")


class InputError(Exception):
    """A bad argument or stack: exit 2 with this message."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    # What every command reads: a stack, from the project's stack file or another one.
    stack_file = argparse.ArgumentParser(add_help=False)
    stack_file.add_argument("stack", help="stack name: stacks/Pulumi.<stack>.yaml")
    stack_file.add_argument("--project-dir", type=Path, default=PROJECT_ROOT, help="the Pulumi project (default: this repo)")
    stack_file.add_argument("--stack-file", type=Path, help="use this stack file instead of stacks/Pulumi.<stack>.yaml")

    parser = argparse.ArgumentParser(prog="python -m platform_tools", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    canary = commands.add_parser(
        "canary",
        parents=[stack_file],
        help="judge a model's canary from Prometheus: promote, hold or roll back",
        description="Compare the canary with the stable version and the profile's target over release.analysis.window; "
        "print the verdict with its numbers; with --write, put the next step into the stack file.",
    )
    canary.add_argument("model", help="the model's name (models[].name)")
    canary.add_argument(
        "--prometheus",
        help=f"Prometheus base URL, e.g. http://prometheus-operated.monitoring.svc:9090 (default: ${PROMETHEUS_ENV})",
    )
    canary.add_argument(
        "--at", help="evaluation time, RFC 3339 with a zone (2026-12-01T03:00:00Z) or unix seconds (default: now)"
    )
    canary.add_argument(
        "--deployed",
        type=Path,
        help="the stack's outputs as deployed (`pulumi stack output --json`): judge only when the stack file's release "
        "of the model (stable, canary, canaryWeight) is the one its canaryReleases output says runs; otherwise print "
        "`wait` and change nothing",
    )
    canary.add_argument("--write", action="store_true", help="write the next step into the stack file (nothing on hold)")
    canary.add_argument("--json", action="store_true", help="print the verdict, numbers and queries as JSON")
    step = commands.add_parser(
        "step",
        parents=[stack_file],
        help="take a canary's step by hand: promote, roll back or hold",
        description="What a person decides instead of the metrics: promote (the next of release.steps; at the last, the "
        "canary becomes stable), rollback (canary weight 0: it waits there for a person) or hold (the canary stays at its "
        "weight and release.hold records why: `canary` then writes no step and `canaries` leaves it out). Promote and "
        "rollback remove a hold. Prints the change; with --write, puts it into the stack file.",
    )
    step.add_argument("model", help="the model's name (models[].name)")
    step.add_argument("action", choices=["promote", "rollback", "hold"], help="the step to take")
    step.add_argument("--reason", help="why (required for hold, 10 to 500 characters: written as release.hold)")
    step.add_argument("--write", action="store_true", help="write the step into the stack file")
    step.add_argument("--json", action="store_true", help="print the step as JSON")
    commands.add_parser(
        "canaries",
        parents=[stack_file],
        help="list the models of a stack whose canary takes traffic, one per line",
        description="The models whose release names a canary at a weight above 0 (what the canary workflow judges; a "
        "canary rolled back to 0 waits for a person), one name per line.",
    )
    aliases = commands.add_parser(
        "aliases",
        parents=[stack_file],
        help="after `pulumi up`: move the registry's serving aliases to what the stack deployed",
        description="Set registry.servingAliases in the MLflow registry from the stack's outputs as deployed: the stable "
        "alias on each model's stable version, the canary alias on its canary while it takes traffic, neither elsewhere. "
        f"The token, when the registry needs one, comes from ${REGISTRY_TOKEN_ENV}. Prints each alias before and after.",
    )
    aliases.add_argument(
        "--deployed", type=Path, required=True, help="the stack's outputs as deployed (`pulumi stack output --json`)"
    )
    aliases.add_argument(
        "--previous",
        type=Path,
        help="the stack's outputs before this deploy: the registered models it took versions from then and no longer "
        "does lose the serving aliases too",
    )
    aliases.add_argument("--dry-run", action="store_true", help="print the moves, change nothing in the registry")
    add_lock_images_command(commands, stack_file)
    return parser.parse_args(argv)


def parse_at(text: str | None) -> float:
    if text is None:
        return time.time()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds) or seconds < 0:
            raise InputError(f"--at {text!r} is not a time: give unix seconds or RFC 3339 (2026-12-01T03:00:00Z)")
        return seconds
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InputError(f"--at {text!r} is neither RFC 3339 (2026-12-01T03:00:00Z) nor unix seconds") from None
    if moment.tzinfo is None:
        raise InputError(f"--at {text!r} has no time zone: add Z or an offset, e.g. {text}Z")
    return moment.timestamp()


def load_platform(project: ProjectFile, stack: str, path: Path | None) -> PlatformConfig:
    """The stack's config read, parsed and checked as the program does (the preview's path:
    the CLI's config strings, then the models and every check, the backends' included)."""
    stack_config = load_stack_config(project, stack, path)

    def parse() -> PlatformConfig:
        runtime_config.set_all_config(stack_config.values, stack_config.secret_keys)
        return parse_platform_config(read_raw_config(), [plan_checks])

    # A copy of the context: the config store is not left set behind.
    return contextvars.copy_context().run(parse)


def find_model(config: PlatformConfig, name: str) -> ModelConfig:
    for model in config.models:
        if model.name == name:
            if model.release.canary is None:
                raise InputError(f"model {name!r} has no canary (release.canary): there is nothing to judge")
            return model
    raise InputError(f"no model {name!r} in the stack; models: {', '.join(m.name for m in config.models)}")


def write_step(project: ProjectFile, stack: str, path: Path, change: Change) -> None:
    """Edit the file in place, atomically, after checking the edited stack validates."""
    data = read_bounded(path, MAX_FILE_BYTES, "a stack file is a few KB")
    new_text = apply_change(data.decode("utf-8"), project.name, change)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(new_text.encode("utf-8"))
        os.chmod(temporary, path.stat().st_mode & 0o7777)
        try:
            load_platform(project, stack, Path(temporary))
        except (ConfigError, StackConfigError) as error:
            raise StackEditError(f"the edited stack would not validate, nothing written: {error}") from None
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


# What a verdict is about: the fields of a release that say which versions take what share.
JUDGED_FIELDS = ("stable", "canary", "canaryWeight")


def not_yet_running(model: ModelConfig, outputs_path: Path) -> list[str]:
    """How the stack file's release of the model differs from the one deployed (its entry in the
    `canaryReleases` output), one phrase per field; empty when they agree. A step merged but not
    yet deployed has no metrics of its own: judging it would judge the previous step's traffic."""
    releases = from_outputs(read_outputs(outputs_path, "--deployed"))
    running = (releases or {}).get(model.name)
    if running is None:
        raise InputError(
            f"--deployed {outputs_path}: no {OUTPUT_NAME} entry for model {model.name!r}: deploy the stack before judging"
        )
    declared = (model.release.stable, model.release.canary, model.release.canary_weight)
    deployed = (running.stable, running.canary, running.canary_weight)
    return [
        f"{key} {ours} in the stack file, {theirs} deployed"
        for key, ours, theirs in zip(JUDGED_FIELDS, declared, deployed)
        if ours != theirs
    ]


def check_stack_name(stack: str) -> None:
    if not _STACK_NAME.fullmatch(stack):
        raise InputError(f"{stack!r} is not a stack name: letters, digits, '-', '_' and '.', at most 100 characters")


def read_stack(args: argparse.Namespace) -> tuple[ProjectFile, Path, PlatformConfig]:
    """The project, the stack file (`--stack-file`, else the project's) and its config, checked as the program
    checks it."""
    check_stack_name(args.stack)
    project = load_project(args.project_dir.resolve())
    path = args.stack_file or project.stack_config_dir / f"Pulumi.{args.stack}.yaml"
    return project, path, load_platform(project, args.stack, path)


def canaries(args: argparse.Namespace) -> int:
    _, _, config = read_stack(args)
    for model in config.models:
        # A canary at weight 0 was rolled back (or not started): it stays there until a person
        # raises it, never promoted again by a later verdict on a handful of override requests;
        # a held one waits for a person too.
        if model.release.canary is not None and model.release.canary_weight > 0 and model.release.hold is None:
            print(model.name)
    return EXIT_VERDICT


def canary_target(config: PlatformConfig, model: ModelConfig) -> Target:
    """What the verdict's queries select: the model's two running versions and, where they have endpoint
    pickers, each picker's Deployment."""
    release = model.release
    assert release.canary is not None  # find_model
    pickers: dict[str, str] = {}
    for version in (release.stable, release.canary):
        picker = endpoint_picker_plan(config, model, version)
        if picker is not None:
            pickers[epp_name(picker)] = version
    return Target(model.tenant, model.name, model.openai_name, release.stable, release.canary, pickers)


def canary(args: argparse.Namespace) -> int:
    check_stack_name(args.stack)
    at = parse_at(args.at)
    url = args.prometheus or os.environ.get(PROMETHEUS_ENV)
    if not url:
        raise InputError(f"no Prometheus to read: give --prometheus URL or set {PROMETHEUS_ENV}")
    url = check_url(url)
    project, path, config = read_stack(args)
    model = find_model(config, args.model)
    release = model.release
    assert release.canary is not None  # find_model
    if args.deployed is not None:
        ahead = not_yet_running(model, args.deployed)
        if ahead:
            reason = f"the stack file's release is not deployed yet ({'; '.join(ahead)}): judge it once it runs"
            if args.json:
                print(
                    json.dumps(
                        {"stack": args.stack, "model": model.name, "verdict": "wait", "reasons": [reason], "written": False}
                    )
                )
            else:
                print(f"{model.name}: wait: {reason}; nothing written")
            return EXIT_VERDICT
    profile = effective_profile(config, model)
    target = canary_target(config, model)
    metrics = read_metrics(url, target, release.analysis.window, at)
    decision = verdict(metrics, release.analysis, profile.ttft_target_ms, release.canary_weight)
    if release.hold is not None:
        # A person holds it: the metrics are shown, the step is theirs (`step`).
        said = f"held by hand: {release.hold} (the metrics alone say {decision.action}; `step` promotes or rolls back)"
        decision = dataclasses.replace(decision, action="hold", reasons=(said, *decision.reasons))
    step = step_taken(release, decision.action)
    report = Report(args.stack, model.name, model.tenant, release, profile.name, profile.ttft_target_ms, metrics, decision, step)
    written = False
    if args.write and step.changes:
        write_step(project, args.stack, path, Change(model.name, release.stable, release.canary, step.new_weight))
        written = True
    if args.json:
        print(json.dumps({**report.to_json(), "stackFile": str(path), "written": written}, indent=2))
    else:
        print(report.text())
        if args.write:
            print(f"wrote {path}: {step.describe(release)}" if written else f"{path} left as it is: nothing to write")
    return EXIT_VERDICT


def step_by_hand(args: argparse.Namespace) -> int:
    project, path, config = read_stack(args)
    model = find_model(config, args.model)
    release = model.release
    assert release.canary is not None  # find_model
    low, high = HOLD_REASON_LENGTH
    if args.action == "hold" and (args.reason is None or not low <= len(args.reason.strip()) <= high):
        raise InputError(f"--reason: hold needs why, {low} to {high} characters (written as release.hold)")
    if args.action != "hold" and args.reason is not None:
        raise InputError(f"--reason: only hold records one ({args.action} removes any hold)")
    taken = step_taken(release, args.action)
    hold = args.reason.strip() if args.action == "hold" else None
    change = Change(model.name, release.stable, release.canary, taken.new_weight, hold)
    changes = taken.changes or hold != release.hold
    description = taken.describe(release)
    if hold != release.hold:
        description += f"; hold: {hold!r}" if hold is not None else f"; the hold ({release.hold!r}) removed"
    written = False
    if args.write and changes:
        write_step(project, args.stack, path, change)
        written = True
    if args.json:
        print(
            json.dumps(
                {
                    "stack": args.stack,
                    "model": model.name,
                    "action": args.action,
                    "canaryWeight": taken.new_weight,
                    "stable": release.canary if taken.new_weight is None else release.stable,
                    "hold": hold,
                    "changes": changes,
                    "description": description,
                    "stackFile": str(path),
                    "written": written,
                },
                indent=2,
            )
        )
    else:
        print(f"{model.name}: {args.action} by hand: {description}")
        if args.write:
            print(f"wrote {path}" if written else f"{path} left as it is: nothing to write")
    return EXIT_VERDICT


def read_outputs(path: Path, flag: str) -> Any:
    try:
        return json.loads(read_bounded(path, MAX_OUTPUTS_BYTES, "stack outputs are a few hundred KB"))
    except ValueError as error:
        raise InputError(f"{flag} {path}: not JSON ({error})") from None


def move_serving_aliases(args: argparse.Namespace) -> int:
    _, _, config = read_stack(args)
    settings = config.registry
    if settings.serving_aliases is None or settings.tracking_uri is None:
        print(f"{args.stack}: no registry.servingAliases: nothing to move")
        return EXIT_VERDICT
    outputs = read_outputs(args.deployed, "--deployed")
    deployed = outputs.get(REGISTRY_OUTPUT) if isinstance(outputs, dict) else None
    if isinstance(deployed, dict) and str(deployed.get("trackingUri", "")).rstrip("/") != settings.tracking_uri.rstrip("/"):
        raise InputError(
            f"--deployed {args.deployed}: resolved at {deployed.get('trackingUri')!r}, but registry.trackingUri is "
            f"{settings.tracking_uri!r}: give this stack's outputs"
        )
    token = os.environ.get(REGISTRY_TOKEN_ENV) or None
    if token and in_clear(settings.tracking_uri):
        raise InputError(
            f"registry.trackingUri {settings.tracking_uri!r} is plain http to another host: {REGISTRY_TOKEN_ENV} would "
            "cross the network in clear"
        )
    previous = read_outputs(args.previous, "--previous") if args.previous is not None else None
    wanted = wanted_aliases(outputs, config, previous)
    moves = move_aliases(LiveRegistry(settings.tracking_uri, settings, token), wanted, write=not args.dry_run)
    for move in moves:
        print(move.text())
    changed = sum(move.changes for move in moves)
    done = "would move" if args.dry_run else "moved"
    print(f"{args.stack}: {done} {changed} of {len(moves)} serving aliases at {settings.tracking_uri}")
    return EXIT_VERDICT


def lock_images(args: argparse.Namespace) -> int:
    project, _, config = read_stack(args)
    write_image_lock(project.root, args.stack, config, args.out, args.mirror, args.plain_http, args.timeout)
    return EXIT_VERDICT


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    commands = {
        "canaries": canaries,
        "canary": canary,
        "step": step_by_hand,
        "aliases": move_serving_aliases,
        "lock-images": lock_images,
    }
    try:
        return commands[args.command](args)
    except RegistryUnusable as error:
        print(f"error: {error.issue}", file=sys.stderr)
        return EXIT_INPUT
    except (
        InputError,
        AliasInputError,
        PrometheusError,
        StackConfigError,
        ConfigError,
        StackEditError,
        ImageLockError,
    ) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INPUT


if __name__ == "__main__":
    sys.exit(main())
