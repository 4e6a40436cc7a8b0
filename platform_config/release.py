"""The canary release record: a model's release (stable version, canary and weight, steps, the weights each version
serves, its LoRA adapters' releases, the step override it went out with), its two written forms and `next_step`.

The program writes the record twice: as its route's annotations (`to_annotations`, which the policy pack's
`canary-weight-steps` reads off the new VirtualService) and as its entry in the `canaryReleases` stack output
(`to_output`), which CI hands the pack back as `previousReleases` and the canary and alias tools read. Every reader
parses with `from_annotations` or `from_output` and accepts one record: a stable version (a non-empty string), a
canary (none, or a non-empty string other than the stable version), a canary weight (0-100, above 0 only with a
canary), steps (weights 1-100, rising strictly and ending at 100; the config's defaults when not recorded), the weights
each version serves and the step override's reason (none, or a non-empty string) and the adapters' releases (the
same, by adapter name, under the model's steps and override; none recorded before adapters were). Anything else is a
ReleaseRecordError naming the key.

Standard library only and importing nothing of the project: the pack, which cannot import the project, runs a
generated copy of this file (`policies/inference_governance/release_record.py`, `make policy-facts`), which a test
compares byte for byte.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

# The route's annotations, one per field of the record.
STABLE_VERSION_ANNOTATION = "inference.platform/stable-version"
CANARY_VERSION_ANNOTATION = "inference.platform/canary-version"
CANARY_WEIGHT_ANNOTATION = "inference.platform/canary-weight"
CANARY_STEPS_ANNOTATION = "inference.platform/canary-steps"
CANARY_STEP_OVERRIDE_ANNOTATION = "inference.platform/canary-step-override"
# The weights each running version serves (hf://org/name@<sha> or s3://...): a change of them
# under the same version name is a release too (a moved registry alias, an edited revision).
STABLE_WEIGHTS_ANNOTATION = "inference.platform/stable-weights"
CANARY_WEIGHTS_ANNOTATION = "inference.platform/canary-weights"
# Each LoRA adapter's release with revisions, as JSON: {adapter: {stable, canary, canaryWeight, stableWeights,
# canaryWeights}}.
ADAPTER_RELEASES_ANNOTATION = "inference.platform/adapter-releases"

# The steps a release goes through when its config names none (`release.steps`' default).
DEFAULT_STEPS: tuple[int, ...] = (10, 25, 50, 100)

# The keys of the output form, in the order the program writes them; an adapter's are a subset.
OUTPUT_KEYS = ("stable", "canary", "canaryWeight", "steps", "stableWeights", "canaryWeights", "adapters", "stepOverride")
ADAPTER_KEYS = ("stable", "canary", "canaryWeight", "stableWeights", "canaryWeights")
REQUIRED_KEYS = ("stable", "canaryWeight")

# A weight as an annotation writes it: a decimal number 0-100 without leading zeros.
_WEIGHT_TEXT = re.compile(r"0|[1-9][0-9]?|100")


class ReleaseRecordError(ValueError):
    """A record that cannot be read: the message names the key and what it takes."""


@dataclass(frozen=True)
class Release:
    """One release: a model's, or one of its adapters' (whose steps and step override are its model's)."""

    stable: str
    canary: str | None = None
    canary_weight: int = 0
    steps: tuple[int, ...] = DEFAULT_STEPS
    # The weights each version serves (None: not known, e.g. a previous stack file naming a
    # registry alias, which only the registry resolves).
    stable_weights: str | None = None
    canary_weights: str | None = None
    # Why this release may skip steps (the release's `stepOverride.reason`).
    step_override: str | None = None
    # The adapters' releases by adapter name; None: not recorded (a release from before adapters' were).
    adapters: Mapping[str, Release] | None = None


def next_step(weight: int, steps: Sequence[int]) -> int | None:
    """The first of `steps` above `weight`; None when none is above it (at the last step: the canary may become the
    stable version)."""
    return next((step for step in sorted(steps) if step > weight), None)


# --- the writers -------------------------------------------------------------------------------


def _adapter_entry(release: Release) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "stable": release.stable,
        "canary": release.canary,
        "canaryWeight": release.canary_weight,
        "stableWeights": release.stable_weights,
    }
    if release.canary is not None:
        entry["canaryWeights"] = release.canary_weights
    return entry


def to_output(release: Release) -> dict[str, Any]:
    """The release as its `canaryReleases` output entry and `previousReleases` policy config entry: the steps too (a
    change is held to the steps in force before it), and the step override's reason (so that the next change cannot
    skip steps on this change's reason)."""
    entry: dict[str, Any] = {
        "stable": release.stable,
        "canary": release.canary,
        "canaryWeight": release.canary_weight,
        "steps": list(release.steps),
        "stableWeights": release.stable_weights,
    }
    if release.canary is not None:
        entry["canaryWeights"] = release.canary_weights
    if release.adapters is not None:
        entry["adapters"] = {name: _adapter_entry(adapter) for name, adapter in release.adapters.items()}
    if release.step_override is not None:
        entry["stepOverride"] = release.step_override
    return entry


def to_annotations(release: Release) -> dict[str, str]:
    """The release as its route's annotations: the weights each version serves when known, the canary's when it has
    one, the step override's reason when set."""
    annotations = {
        STABLE_VERSION_ANNOTATION: release.stable,
        CANARY_WEIGHT_ANNOTATION: str(release.canary_weight),
        CANARY_STEPS_ANNOTATION: ",".join(str(step) for step in release.steps),
    }
    if release.adapters is not None:
        # Present when empty too: a later change's new adapter canary is then compared with "none".
        adapters = {name: _adapter_entry(adapter) for name, adapter in release.adapters.items()}
        annotations[ADAPTER_RELEASES_ANNOTATION] = json.dumps(adapters, sort_keys=True, separators=(",", ":"))
    if release.stable_weights is not None:
        annotations[STABLE_WEIGHTS_ANNOTATION] = release.stable_weights
    if release.canary is not None:
        annotations[CANARY_VERSION_ANNOTATION] = release.canary
        if release.canary_weights is not None:
            annotations[CANARY_WEIGHTS_ANNOTATION] = release.canary_weights
    if release.step_override is not None:
        annotations[CANARY_STEP_OVERRIDE_ANNOTATION] = release.step_override
    return annotations


# --- the readers -------------------------------------------------------------------------------


def _version(value: Any, key: str) -> str:
    if not isinstance(value, str) or not value:
        raise ReleaseRecordError(f"{key} is {value!r}, not a version name (a non-empty string)")
    return value


def _optional_text(value: Any, key: str, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ReleaseRecordError(f"{key} is {value!r}, not {what} (a non-empty string, or none)")
    return value


def _weight(value: Any, key: str) -> int:
    """A weight, whole: JSON does not tell 10 from 10.0, and the analyzer hands the pack every number as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value not in range(101):
        raise ReleaseRecordError(f"{key} is {value!r}, not a weight (a whole number 0-100)")
    return int(value)


def _steps(values: Sequence[int], key: str) -> tuple[int, ...]:
    steps = tuple(values)
    rising = all(low < high for low, high in zip(steps, steps[1:]))
    if not steps or not all(1 <= step <= 100 for step in steps) or not rising or steps[-1] != 100:
        raise ReleaseRecordError(f"{key} is {list(values)!r}, not steps (weights 1-100, rising strictly, ending at 100)")
    return steps


def _release(fields: dict[str, Any], keys: Mapping[str, str]) -> Release:
    """A release of fields already read one by one, held to the rules between them (`keys`: where each field was
    read, for the message)."""
    release = Release(**fields)
    if release.canary is not None and release.canary == release.stable:
        raise ReleaseRecordError(f"{keys['canary']} is {release.canary!r}, the stable version: a canary is another version")
    if release.canary is None and release.canary_weight != 0:
        raise ReleaseRecordError(f"{keys['canary_weight']} is {release.canary_weight}, but the release has no canary")
    return release


_OUTPUT_FIELDS = {
    "stable": "stable",
    "canary": "canary",
    "canary_weight": "canaryWeight",
    "steps": "steps",
    "stable_weights": "stableWeights",
    "canary_weights": "canaryWeights",
    "step_override": "stepOverride",
    "adapters": "adapters",
}


def _from_entry(entry: Any, where: str, allowed: Sequence[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The fields of one output-form entry (a model's, or an adapter's with `ADAPTER_KEYS`), and where each is."""
    if not isinstance(entry, Mapping):
        raise ReleaseRecordError(f"{where} is not a release (an object: {', '.join(allowed)})")
    unknown = sorted(str(key) for key in entry if key not in allowed)
    if unknown:
        raise ReleaseRecordError(f"{where}.{unknown[0]} is not a key of a release ({', '.join(allowed)})")
    missing = [key for key in REQUIRED_KEYS if key not in entry]
    if missing:
        raise ReleaseRecordError(f"{where}.{missing[0]} is missing: a release names {' and '.join(REQUIRED_KEYS)}")
    keys = {name: f"{where}.{key}" for name, key in _OUTPUT_FIELDS.items()}
    fields: dict[str, Any] = {
        "stable": _version(entry["stable"], keys["stable"]),
        "canary": None if entry.get("canary") is None else _version(entry["canary"], keys["canary"]),
        "canary_weight": _weight(entry["canaryWeight"], keys["canary_weight"]),
        "stable_weights": _optional_text(entry.get("stableWeights"), keys["stable_weights"], "a weights location"),
        "canary_weights": _optional_text(entry.get("canaryWeights"), keys["canary_weights"], "a weights location"),
    }
    return fields, keys


def _adapters(entries: Any, where: str, model: Release) -> dict[str, Release]:
    """The adapters' releases of an object by adapter name, each under its model's steps and step override."""
    if not isinstance(entries, Mapping):
        raise ReleaseRecordError(f"{where} is not an object of adapter releases by adapter name")
    adapters: dict[str, Release] = {}
    for name, entry in entries.items():
        fields, keys = _from_entry(entry, f"{where}.{name}", ADAPTER_KEYS)
        adapters[str(name)] = _release({**fields, "steps": model.steps, "step_override": model.step_override}, keys)
    return adapters


def from_output(entry: Any, where: str) -> Release:
    """A release from its output form (a `canaryReleases` or `previousReleases` entry, found at `where`)."""
    fields, keys = _from_entry(entry, where, OUTPUT_KEYS)
    steps = entry.get("steps")
    if steps is not None:
        # A list, or the read-only sequence the analyzer hands the pack one as.
        if not isinstance(steps, Sequence) or isinstance(steps, (str, bytes)):
            raise ReleaseRecordError(f"{keys['steps']} is {steps!r}, not a list of steps")
        fields["steps"] = _steps([_weight(step, f"{keys['steps']}[{i}]") for i, step in enumerate(steps)], keys["steps"])
    fields["step_override"] = _optional_text(entry.get("stepOverride"), keys["step_override"], "a step override's reason")
    release = _release(fields, keys)
    if entry.get("adapters") is None:
        return release
    return replace(release, adapters=_adapters(entry["adapters"], keys["adapters"], release))


def _annotation_weight(text: Any, key: str) -> int:
    if not isinstance(text, str) or not _WEIGHT_TEXT.fullmatch(text):
        raise ReleaseRecordError(f"{key} is {text!r}, not a weight (a whole number 0-100)")
    return int(text)


def from_annotations(annotations: Mapping[str, Any]) -> Release | None:
    """The release a route's annotations declare; None when they declare none (a route the platform did not build)."""
    if STABLE_VERSION_ANNOTATION not in annotations:
        return None
    if CANARY_WEIGHT_ANNOTATION not in annotations:
        raise ReleaseRecordError(f"{CANARY_WEIGHT_ANNOTATION} is missing: a release names its canary weight")
    canary = annotations.get(CANARY_VERSION_ANNOTATION)
    steps = annotations.get(CANARY_STEPS_ANNOTATION)
    if steps is not None and not isinstance(steps, str):
        raise ReleaseRecordError(f"{CANARY_STEPS_ANNOTATION} is {steps!r}, not comma-separated steps")
    override = annotations.get(CANARY_STEP_OVERRIDE_ANNOTATION) or None
    fields: dict[str, Any] = {
        "stable": _version(annotations[STABLE_VERSION_ANNOTATION], STABLE_VERSION_ANNOTATION),
        "canary": None if canary is None else _version(canary, CANARY_VERSION_ANNOTATION),
        "canary_weight": _annotation_weight(annotations[CANARY_WEIGHT_ANNOTATION], CANARY_WEIGHT_ANNOTATION),
        "steps": DEFAULT_STEPS
        if steps is None
        else _steps([_annotation_weight(step, CANARY_STEPS_ANNOTATION) for step in steps.split(",")], CANARY_STEPS_ANNOTATION),
        "stable_weights": _optional_text(annotations.get(STABLE_WEIGHTS_ANNOTATION), STABLE_WEIGHTS_ANNOTATION, "weights"),
        "canary_weights": _optional_text(annotations.get(CANARY_WEIGHTS_ANNOTATION), CANARY_WEIGHTS_ANNOTATION, "weights"),
        "step_override": _optional_text(override, CANARY_STEP_OVERRIDE_ANNOTATION, "a step override's reason"),
    }
    keys = {
        "canary": CANARY_VERSION_ANNOTATION,
        "canary_weight": CANARY_WEIGHT_ANNOTATION,
    }
    release = _release(fields, keys)
    recorded = annotations.get(ADAPTER_RELEASES_ANNOTATION)
    if recorded is None:
        return release
    try:
        entries = json.loads(recorded) if isinstance(recorded, str) else None
    except ValueError:
        entries = None
    if not isinstance(entries, Mapping):
        raise ReleaseRecordError(f"{ADAPTER_RELEASES_ANNOTATION} is not a JSON object of adapter releases")
    return replace(release, adapters=_adapters(entries, ADAPTER_RELEASES_ANNOTATION, release))


# --- the policy config's schema ------------------------------------------------------------------

_TEXT_SCHEMA = {"type": ["string", "null"], "minLength": 1}
_ADAPTER_PROPERTIES: dict[str, Any] = {
    "stable": {"type": "string", "minLength": 1},
    "canary": _TEXT_SCHEMA,
    "canaryWeight": {"type": "integer", "minimum": 0, "maximum": 100},
    # The weights each version served (hf://org/name@<sha>, s3://...; null when not known).
    "stableWeights": _TEXT_SCHEMA,
    "canaryWeights": _TEXT_SCHEMA,
}
# One LoRA adapter's release as it was last deployed (a model's `adapters` in `canaryReleases`).
ADAPTER_RELEASE_SCHEMA = {
    "type": "object",
    "properties": _ADAPTER_PROPERTIES,
    "required": list(REQUIRED_KEYS),
    "additionalProperties": False,
}
# The previous release of each model, by model name, as the program's `canaryReleases` output records it (the
# schema of what `from_output` reads; the policy config's `previousReleases`).
RELEASES_SCHEMA = {
    "type": "object",
    "additionalProperties": {
        "type": "object",
        "properties": {
            **_ADAPTER_PROPERTIES,
            "steps": {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 100}, "minItems": 1},
            # The step override's reason the previous change was deployed with, if any.
            "stepOverride": _TEXT_SCHEMA,
            # The model's adapters' releases, by adapter name (held to the model's steps).
            "adapters": {"type": "object", "additionalProperties": ADAPTER_RELEASE_SCHEMA},
        },
        "required": list(REQUIRED_KEYS),
        "additionalProperties": False,
    },
}
