"""A recorded resolution (`registry-resolution.json`, written by a live preview), read for an offline preview, and the
lock file (`registry.lockFile`, a committed recording) that `pulumi up` holds the registry's answers to."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Annotated, Any, Literal

import pulumi
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from ..errors import ConfigError, ConfigIssue
from ..models import PINNED_FORMS, MlflowReference, RegistryConfig, pinned_source
from .entries import RegistryEntry, describe_reference, quote, reference_of

# Names a recorded resolution for the program to use instead of the live registry (previews only).
REGISTRY_FILE_ENV = "INFERENCE_PLATFORM_REGISTRY_FILE"
# What a live preview writes into its output folder, for `--registry-file` later.
RECORDING_NAME = "registry-resolution.json"
RECORDING_FORMAT = "inference-platform/registry-resolution"
RECORDING_FORMAT_VERSION = 1
MAX_RECORDING_BYTES = 4 << 20


class RegistryFileError(pulumi.RunError):
    """A recorded resolution that cannot be used: the CLI and the preview print the message and exit 2."""


class _RecordingModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, alias_generator=to_camel, validate_by_name=True)


class RecordedEntry(_RecordingModel):
    registered_model: Annotated[str, Field(min_length=1, max_length=256)]
    alias: Annotated[str, Field(min_length=1, max_length=255)] | None = None
    version: Annotated[int, Field(gt=0)] | None = None
    registry_version: Annotated[str, Field(pattern=r"^[0-9]{1,18}$")]
    weights: Annotated[str, Field(min_length=1, max_length=2048)]

    @model_validator(mode="after")
    def _alias_or_version(self) -> RecordedEntry:
        if (self.alias is None) == (self.version is None):
            raise ValueError("give exactly one of 'alias' or 'version'")
        if self.version is not None and str(self.version) != self.registry_version:
            raise ValueError(f"version {self.version} resolved to registryVersion {self.registry_version!r}")
        if pinned_source(self.weights) is None:
            raise ValueError(f"weights {self.weights!r} is not a pinned location ({PINNED_FORMS})")
        return self


class Recording(_RecordingModel):
    format: Literal["inference-platform/registry-resolution"]
    format_version: Literal[1]
    tracking_uri: Annotated[str, Field(min_length=1, max_length=2048)]
    recorded_at: Annotated[str, Field(pattern=r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")]
    entries: list[RecordedEntry]


def recording(output: dict[str, Any], recorded_at: str) -> dict[str, Any]:
    """The recording of a live resolution, from its `modelRegistry` stack output: each reference once."""
    entries: dict[str, dict[str, Any]] = {}
    for versions in output["models"].values():
        for entry in versions.values():
            if entry.get("source") == "registry":
                record = {k: v for k, v in entry.items() if k != "source"}
                entries[json.dumps([record["registeredModel"], record.get("alias"), record.get("version")])] = record
    return {
        "format": RECORDING_FORMAT,
        "formatVersion": RECORDING_FORMAT_VERSION,
        "trackingUri": output["trackingUri"],
        "recordedAt": recorded_at,
        "entries": [entries[key] for key in sorted(entries)],
    }


def read_recording(path: Path, where: str | None = None) -> Recording:
    """A recording file, strictly checked; RegistryFileError naming the file (`where` says which and how it was
    named: by default the recording INFERENCE_PLATFORM_REGISTRY_FILE names) and the bad key."""
    where = where or f"the recorded registry resolution {path} ({REGISTRY_FILE_ENV})"
    try:
        # Not a FIFO or a device, whose read would block or never end.
        if not stat.S_ISREG(path.stat().st_mode):
            raise RegistryFileError(f"{where} is not a regular file")
        with path.open("rb") as handle:
            data = handle.read(MAX_RECORDING_BYTES + 1)
    except OSError as error:
        raise RegistryFileError(f"{where} cannot be read: {error.strerror or error}") from None
    if len(data) > MAX_RECORDING_BYTES:
        raise RegistryFileError(f"{where} is larger than {MAX_RECORDING_BYTES >> 20} MiB: not a recording")
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise RegistryFileError(f"{where} is not JSON: {quote(str(error))}") from None
    try:
        parsed = Recording.model_validate(document, by_alias=True, by_name=False)
    except ValidationError as error:
        problems = [f"{_json_path(detail['loc'])}: {quote(detail['msg'])}" for detail in error.errors(include_url=False)]
        raise RegistryFileError(f"{where} is not a valid recording: " + "; ".join(problems[:5])) from None
    seen: set[tuple[str, str | None, int | None]] = set()
    for index, entry in enumerate(parsed.entries):
        reference = (entry.registered_model, entry.alias, entry.version)
        if reference in seen:
            raise RegistryFileError(f"{where}: entries[{index}] records a reference an earlier entry records")
        seen.add(reference)
    return parsed


def _json_path(location: tuple[Any, ...]) -> str:
    text = ""
    for part in location:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(the document)"


class RecordedRegistry:
    """A recording's answers, for a preview without the registry."""

    def __init__(self, path: Path, parsed: Recording):
        self.path = path
        self.parsed = parsed
        self.entries = {(e.registered_model, e.alias, e.version): e for e in parsed.entries}

    def resolve(self, reference: MlflowReference, key: tuple[str | int, ...]) -> RegistryEntry | ConfigIssue:
        found = self.entries.get(reference_of(reference))
        if found is None:
            asked = "alias" if reference.alias is not None else "version"
            return ConfigIssue(
                (*key, asked),
                f"the recorded registry resolution {self.path} has no entry for {describe_reference(reference)}: "
                "preview live once to record it",
            )
        return RegistryEntry(reference.model, reference.alias, reference.version, found.registry_version, found.weights)


# --- the lock file --------------------------------------------------------------------------

# `registry.lockFile` is relative to the project directory, the one holding Pulumi.yaml: the platform_config
# package's parent.
PROJECT_DIR = Path(__file__).resolve().parent.parent.parent


def read_recording_of(path: Path, settings: RegistryConfig, key: str, named: str, read_as: str | None = None) -> Recording:
    """A recording file (`named` says which, for the message; `read_as` for read_recording's) that must be of the
    stack's registry: ConfigError at `registry.<key>` when it records another."""
    assert settings.tracking_uri is not None
    parsed = read_recording(path, read_as)
    if parsed.tracking_uri.rstrip("/") != settings.tracking_uri.rstrip("/"):
        raise ConfigError(
            [
                ConfigIssue(
                    ("registry", key),
                    f"{settings.tracking_uri!r}, but {named} is of {parsed.tracking_uri!r}: record it from this registry",
                )
            ]
        )
    return parsed


def read_lock(settings: RegistryConfig, project_dir: Path) -> tuple[str, Recording]:
    """The lock file `registry.lockFile` names (its path as given, and its content), a recording of this registry;
    ConfigError at that key when it cannot be read or is not a recording."""
    assert settings.lock_file is not None
    named = f"the lock file {settings.lock_file}"
    try:
        locked = read_recording_of(project_dir / settings.lock_file, settings, "lockFile", named, read_as=named)
    except RegistryFileError as error:
        raise ConfigError([ConfigIssue(("registry", "lockFile"), str(error))]) from None
    return settings.lock_file, locked


def lock_differences(
    lock_file: str,
    locked: Recording,
    answered: dict[tuple[str, str | None, int | None], tuple[tuple[str | int, ...], RegistryEntry]],
) -> list[ConfigIssue]:
    """Each reference whose answer the lock file does not hold (its version and weights), under the stack key
    that first asked it."""
    held = {(e.registered_model, e.alias, e.version): e for e in locked.entries}
    refresh = f"preview live and commit its registry-resolution.json as {lock_file} to deploy it"
    issues = []
    for reference, (key, entry) in answered.items():
        answer = f"version {entry.registry_version} ({entry.weights})"
        asked = f"alias {entry.alias!r}" if entry.alias is not None else f"version {entry.requested_version}"
        found = held.get(reference)
        if found is None:
            message = (
                f"{asked} of {entry.registered_model!r} resolves to {answer}, which the lock file {lock_file} does "
                f"not hold: {refresh}"
            )
        elif (found.registry_version, found.weights) != (entry.registry_version, entry.weights):
            message = (
                f"{asked} of {entry.registered_model!r} now resolves to {answer}; the lock file {lock_file} holds "
                f"version {found.registry_version} ({found.weights}): {refresh}"
            )
        else:
            continue
        issues.append(ConfigIssue(key, message))
    return issues
