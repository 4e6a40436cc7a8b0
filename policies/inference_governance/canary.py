"""Canary releases held to the previous release: a canary's weight rises by at most one
configured step per change, and a canary becomes the stable version only from the last step.
The same rule holds each LoRA adapter's revision canary (the route's adapter releases), with its
base model's steps and step override.

The analyzer protocol sends a policy the new resource only, never the state it replaces, so the
previous releases come in through the policy config (`previousReleases`): the offline preview
derives them from a baseline preview or the previous stack file, and CI from the stack's last
`canaryReleases` output (`python -m preview.previous_releases`). Without them there is nothing to
compare and the rule passes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .kube import VIRTUAL_SERVICE, Report, config, get, name_of, namespace_of
from .release_record import (
    DEFAULT_STEPS,
    RELEASES_SCHEMA,
    Release,
    ReleaseRecordError,
    from_annotations,
    from_output,
    next_step,
)

OVERRIDE_HINT = "set release.stepOverride.reason to skip steps"

# The config schema of canary-weight-steps and canary-step-override (policies/inference_governance/pack.py declares them): the
# previous release of each model, by model name, as the program's `canaryReleases` output records it; given by the
# preview (a baseline or `--previous-stack-file`) or by CI (`python -m preview.previous_releases --from-outputs`).
# Without it there is nothing to compare.
PREVIOUS_RELEASES = {"previousReleases": RELEASES_SCHEMA}


def _moved(before: str | None, after: str | None) -> bool:
    return before is not None and after is not None and before != after


def step_violation(model: str, previous: Release | None, new: Release) -> str | None:
    """Why the change from `previous` to `new` breaks the step rule, or None if it keeps it.

    The steps are the previous release's when it recorded them, else the defaults the config
    applies when a stack names none; never the new release's: a change cannot loosen the very
    rule it is held to (new steps apply from the next change), and a new model's canary starts
    at no more than the default first step.
    Allowed: a weight that does not rise; a rise to exactly the next step above the previous
    weight (same stable and canary); a new canary (or a new model) at no more than the first
    step; promoting the canary to stable once it took the last step (100). Anything else needs
    the release's step override."""
    rule_steps = sorted(previous.steps if previous is not None else DEFAULT_STEPS)
    first = rule_steps[0]
    if previous is None:
        if new.canary is not None and new.canary_weight > first:
            return (
                f"model {model} is new: its canary {new.canary} starts at {new.canary_weight}%, above the first step "
                f"{first}%; {OVERRIDE_HINT}"
            )
        return None
    fresh_canary = True
    if new.stable == previous.stable and _moved(previous.stable_weights, new.stable_weights):
        return (
            f"model {model}: stable version {new.stable} now serves {new.stable_weights} instead of "
            f"{previous.stable_weights} (a moved registry alias or an edited revision): new weights reach stable only "
            f"as a canary through the steps; {OVERRIDE_HINT}"
        )
    if new.stable != previous.stable:
        if previous.canary is None or new.stable != previous.canary:
            return (
                f"model {model}: stable version {previous.stable} -> {new.stable}, which was not the canary "
                f"({previous.canary or 'none'}): a version reaches stable only through the steps; {OVERRIDE_HINT}"
            )
        if _moved(previous.canary_weights, new.stable_weights):
            return (
                f"model {model}: canary {previous.canary} promoted to stable serving {new.stable_weights}, not the "
                f"{previous.canary_weights} it was judged on (a moved registry alias?); {OVERRIDE_HINT}"
            )
        if previous.canary_weight < rule_steps[-1]:
            return (
                f"model {model}: canary {previous.canary} promoted to stable at {previous.canary_weight}%; promotion needs "
                f"the last step ({rule_steps[-1]}%), the next allowed step is {next_step(previous.canary_weight, rule_steps)}%; "
                f"{OVERRIDE_HINT}"
            )
    elif new.canary is not None and new.canary == previous.canary:
        # The same canary name serving other weights is a new canary: it starts again.
        fresh_canary = _moved(previous.canary_weights, new.canary_weights)
    if new.canary is None or new.canary_weight == 0:
        return None
    if fresh_canary:
        if new.canary_weight > first:
            was = f"{previous.canary} at {previous.canary_weight}%" if previous.canary else "none"
            if new.canary == previous.canary:
                was = f"{previous.canary_weights} at {previous.canary_weight}%, now {new.canary_weights}"
            return (
                f"model {model}: new canary {new.canary} (was {was}) starts at {new.canary_weight}%, above the first "
                f"step {first}%; {OVERRIDE_HINT}"
            )
        return None
    if new.canary_weight <= previous.canary_weight:
        return None
    allowed = next_step(previous.canary_weight, rule_steps)
    if new.canary_weight != allowed:
        return (
            f"model {model}: canary {new.canary} weight {previous.canary_weight}% -> {new.canary_weight}% skips steps: "
            f"the next allowed step is {allowed}% (steps {', '.join(map(str, rule_steps))}); {OVERRIDE_HINT}"
        )
    return None


def _held(subject: str, previous: Release | None, new: Release, reason: str | None) -> tuple[str | None, str | None]:
    """The violation of the change from `previous` to `new` and the override's reason that covers it."""
    violation = step_violation(subject, previous, new)
    if violation is not None and previous is not None and reason is not None and reason == previous.step_override:
        # An override covers the change it was written for: left in the file, it would switch
        # the rule off for every change after.
        violation = f"{violation} (the step override {reason!r} was the previous change's: write this change's own reason)"
        reason = None
    return violation, reason


def _checked(args: Any) -> list[tuple[str, Release | str, str | None, str | None]]:
    """(what is held: the model, or `<model> adapter <name>`; what the route declares or why it, or the previous
    release, cannot be read; the violation; the override's reason) for the release of a route's model and of each of
    its adapters, when there is a previous release to compare with; none otherwise."""
    if args.resource_type != VIRTUAL_SERVICE:
        return []
    previous_releases = config(args).get("previousReleases")
    if not isinstance(previous_releases, Mapping):
        return []
    annotations = get(args.props, "metadata", "annotations", default={})
    model = name_of(args.props)
    try:
        new = from_annotations(annotations)
    except ReleaseRecordError as error:
        return [(model, f"its release annotations cannot be read: {error}", None, None)]
    if new is None:
        return []
    try:
        entry = previous_releases.get(model)
        previous = None if entry is None else from_output(entry, f"previousReleases.{model}")
    except ReleaseRecordError as error:
        return [(model, f"the policy config's previous release cannot be read: {error}", None, None)]
    reason = new.step_override
    checked: list[tuple[str, Release | str, str | None, str | None]] = [(model, new, *_held(model, previous, new, reason))]
    # The adapters' releases, with the model's steps and override: a new model's are new too; a
    # previous release that recorded no adapters' (one from before them) has nothing to compare.
    recorded = previous.adapters if previous is not None else {}
    if new.adapters is None or recorded is None:
        return checked
    for name, adapter in sorted(new.adapters.items()):
        subject = f"{model} adapter {name}"
        checked.append((subject, adapter, *_held(subject, recorded.get(name), adapter, reason)))
    return checked


def canary_weight_steps(args: Any, report_violation: Report) -> None:
    for _, new, violation, reason in _checked(args):
        where = f"VirtualService {namespace_of(args.props)}/{name_of(args.props)}"
        if isinstance(new, str):
            report_violation(f"{where}: {new}")
        elif violation is not None and not isinstance(reason, str):
            report_violation(f"{where}: {violation}")


def canary_step_override(args: Any, report_violation: Report) -> None:
    """Advisory: a change that skips steps under the release's step override, with its reason,
    so the report records who skipped what and why."""
    for _, _, violation, reason in _checked(args):
        if violation is not None and isinstance(reason, str):
            hint = f"; {OVERRIDE_HINT}"
            report_violation(
                f"VirtualService {namespace_of(args.props)}/{name_of(args.props)}: step override in force ({reason!r}): "
                f"{violation.removesuffix(hint)}"
            )
