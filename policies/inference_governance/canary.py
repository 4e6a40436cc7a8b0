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

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .kube import (
    ADAPTER_RELEASES_ANNOTATION,
    CANARY_STEP_OVERRIDE_ANNOTATION,
    CANARY_STEPS_ANNOTATION,
    CANARY_VERSION_ANNOTATION,
    CANARY_WEIGHT_ANNOTATION,
    CANARY_WEIGHTS_ANNOTATION,
    DEFAULT_CANARY_STEPS,
    STABLE_VERSION_ANNOTATION,
    STABLE_WEIGHTS_ANNOTATION,
    VIRTUAL_SERVICE,
    Report,
    config,
    get,
    is_list,
    name_of,
    namespace_of,
)

OVERRIDE_HINT = "set release.stepOverride.reason to skip steps"

# The config schema of canary-weight-steps and canary-step-override (policies/__main__.py declares them).
# One LoRA adapter's release as it was last deployed (a model's `adapters` in `canaryReleases`).
ADAPTER_RELEASE = {
    "type": "object",
    "properties": {
        "stable": {"type": "string", "minLength": 1},
        "canary": {"type": ["string", "null"]},
        "canaryWeight": {"type": "integer", "minimum": 0, "maximum": 100},
        "stableWeights": {"type": ["string", "null"]},
        "canaryWeights": {"type": ["string", "null"]},
    },
    "required": ["stable"],
    "additionalProperties": False,
}
# The previous release of each model, by model name, as the program's `canaryReleases` output
# records it; given by the preview (a baseline or `--previous-stack-file`) or by CI
# (`python -m preview.previous_releases --from-outputs`). Without it there is nothing to compare.
PREVIOUS_RELEASES = {
    "previousReleases": {
        "type": "object",
        "additionalProperties": {
            "type": "object",
            "properties": {
                "stable": {"type": "string", "minLength": 1},
                "canary": {"type": ["string", "null"]},
                "canaryWeight": {"type": "integer", "minimum": 0, "maximum": 100},
                "steps": {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 100}, "minItems": 1},
                # The weights each version served (hf://org/name@<sha>, s3://...; null when not known).
                "stableWeights": {"type": ["string", "null"]},
                "canaryWeights": {"type": ["string", "null"]},
                # The step override's reason the previous change was deployed with, if any.
                "stepOverride": {"type": ["string", "null"]},
                # The model's adapters' releases, by adapter name (held to the model's steps).
                "adapters": {"type": "object", "additionalProperties": ADAPTER_RELEASE},
            },
            "required": ["stable"],
            "additionalProperties": False,
        },
    }
}


@dataclass(frozen=True)
class Release:
    stable: str
    canary: str | None
    canary_weight: int
    # The steps configured with this release (None: not recorded).
    steps: tuple[int, ...] | None = None
    # The weights each version serves (None: not known, e.g. a previous stack file naming a
    # registry alias, which only the registry resolves).
    stable_weights: str | None = None
    canary_weights: str | None = None
    # The step override's reason this release was deployed with (previous releases only).
    step_override: str | None = None


def _moved(before: str | None, after: str | None) -> bool:
    return before is not None and after is not None and before != after


def next_step(weight: int, steps: Sequence[int]) -> int | None:
    """The first configured step above `weight` (None when there is none above it)."""
    return next((step for step in sorted(steps) if step > weight), None)


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
    rule_steps = sorted(previous.steps if previous is not None and previous.steps else DEFAULT_CANARY_STEPS)
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


def _steps(text: Any) -> tuple[int, ...] | None:
    if not isinstance(text, str):
        return None
    try:
        steps = tuple(int(part) for part in text.split(","))
    except ValueError:
        return None
    return steps if steps and all(0 < step <= 100 for step in steps) else None


def _weight(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)) and value == int(value):
        return int(value) if 0 <= value <= 100 else None
    if isinstance(value, str) and value.isdigit():
        return int(value) if int(value) <= 100 else None
    return None


def declared_release(annotations: Mapping[str, Any]) -> Release | str | None:
    """The release a route's annotations declare; None when it declares none (a route the
    platform did not build); a reason when they cannot be read."""
    stable = annotations.get(STABLE_VERSION_ANNOTATION)
    if stable is None:
        return None
    canary = annotations.get(CANARY_VERSION_ANNOTATION)
    weight = _weight(annotations.get(CANARY_WEIGHT_ANNOTATION, "0"))
    steps = _steps(annotations.get(CANARY_STEPS_ANNOTATION, ",".join(map(str, DEFAULT_CANARY_STEPS))))
    stable_weights, canary_weights = (annotations.get(k) for k in (STABLE_WEIGHTS_ANNOTATION, CANARY_WEIGHTS_ANNOTATION))
    if not all(w is None or isinstance(w, str) for w in (stable_weights, canary_weights)):
        return f"its weights annotations ({STABLE_WEIGHTS_ANNOTATION}, {CANARY_WEIGHTS_ANNOTATION}) are not strings"
    if not isinstance(stable, str) or not (canary is None or isinstance(canary, str)) or weight is None or steps is None:
        return (
            f"its release annotations cannot be read ({STABLE_VERSION_ANNOTATION}, {CANARY_VERSION_ANNOTATION}, "
            f"{CANARY_WEIGHT_ANNOTATION}: 0-100, {CANARY_STEPS_ANNOTATION}: comma-separated weights)"
        )
    return Release(stable, canary, weight, steps, stable_weights, canary_weights)


def previous_release(entry: Any) -> Release | None:
    """An entry of `previousReleases` ({stable, canary, canaryWeight, steps?}); None if unusable
    (the config schema refuses such entries before the pack runs)."""
    if not isinstance(entry, Mapping) or not isinstance(entry.get("stable"), str):
        return None
    canary = entry.get("canary")
    weight = _weight(entry.get("canaryWeight", 0))
    steps = entry.get("steps")
    recorded = tuple(int(s) for s in steps) if is_list(steps) and steps and all(_weight(s) for s in steps) else None
    stable_weights, canary_weights, override = (
        entry.get(k) if isinstance(entry.get(k), str) else None for k in ("stableWeights", "canaryWeights", "stepOverride")
    )
    return Release(
        entry["stable"],
        canary if isinstance(canary, str) else None,
        weight or 0,
        recorded,
        stable_weights,
        canary_weights,
        override,
    )


def declared_adapter_releases(annotations: Mapping[str, Any], steps: tuple[int, ...] | None) -> dict[str, Release | str] | None:
    """Each adapter's release a route's annotations declare (with the model's `steps`), or why one
    cannot be read; None when the route declares no adapter releases (a route from before them)."""
    raw = annotations.get(ADAPTER_RELEASES_ANNOTATION)
    if raw is None:
        return None
    try:
        entries = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        entries = None
    if not isinstance(entries, Mapping):
        return {"": f"{ADAPTER_RELEASES_ANNOTATION} is not a JSON object of adapter releases"}
    releases: dict[str, Release | str] = {}
    for name, entry in entries.items():
        release = previous_release(entry)
        if release is None or (isinstance(entry, Mapping) and _weight(entry.get("canaryWeight", 0)) is None):
            releases[name] = f"{ADAPTER_RELEASES_ANNOTATION}: adapter {name!r} has no readable release"
        else:
            releases[name] = dataclasses.replace(release, steps=steps, step_override=None)
    return releases


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
    """(what is held: the model, or `<model> adapter <name>`; what the route declares or why it
    cannot be read; the violation; the override's reason) for the release of a route's model and of
    each of its adapters, when there is a previous release to compare with; none otherwise."""
    if args.resource_type != VIRTUAL_SERVICE:
        return []
    previous_releases = config(args).get("previousReleases")
    if not isinstance(previous_releases, Mapping):
        return []
    annotations = get(args.props, "metadata", "annotations", default={})
    new = declared_release(annotations)
    if new is None:
        return []
    model = name_of(args.props)
    reason = annotations.get(CANARY_STEP_OVERRIDE_ANNOTATION) or None
    if isinstance(new, str):
        return [(model, new, None, reason)]
    previous = previous_release(previous_releases.get(model))
    assert new.steps is not None
    checked: list[tuple[str, Release | str, str | None, str | None]] = [(model, new, *_held(model, previous, new, reason))]
    # The adapters' releases, with the model's steps and override: a new model's are new too; a
    # previous release that recorded no adapters' (one from before them) has nothing to compare.
    adapters = declared_adapter_releases(annotations, new.steps)
    recorded = previous_releases[model].get("adapters") if previous is not None else {}
    if adapters is None or not isinstance(recorded, Mapping):
        return checked
    for name, adapter in sorted(adapters.items()):
        subject = f"{model} adapter {name}"
        if isinstance(adapter, str):
            checked.append((subject, adapter, None, reason))
            continue
        before = previous_release(recorded.get(name))
        if before is not None and previous is not None:
            before = dataclasses.replace(before, steps=previous.steps, step_override=previous.step_override)
        checked.append((subject, adapter, *_held(subject, before, adapter, reason)))
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
