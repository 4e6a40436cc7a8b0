"""Resolving a config: every `mlflow` source replaced by the pinned source the registry (or a recording) names, and
what each reference resolved to."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from ..adapters import module_name
from ..errors import ConfigError, ConfigIssue
from ..models import MlflowReference, ModelSource, PlatformConfig, RegistryConfig, pinned_source
from .client import LiveRegistry, RegistryUnusable, in_clear
from .entries import RegistryEntry, reference_of
from .recordings import (
    PROJECT_DIR,
    REGISTRY_FILE_ENV,
    RecordedRegistry,
    RegistryFileError,
    lock_differences,
    read_lock,
    read_recording_of,
)


@dataclass(frozen=True)
class RegistryResolution:
    """Where the stack's registry references were resolved, and to what: per (model, version name)."""

    origin: Literal["live", "recorded"]
    tracking_uri: str
    versions: dict[tuple[str, str], RegistryEntry] = field(default_factory=dict)
    # A recorded resolution: its file and when the live preview that wrote it resolved.
    recording_file: str | None = None
    recorded_at: str | None = None
    # `registry.lockFile`, and what a preview resolved that it does not hold (`pulumi up` stops on any).
    lock_file: str | None = None
    lock_differences: tuple[str, ...] = ()

    def entry(self, model: str, version: str) -> RegistryEntry | None:
        return self.versions.get((model, version))

    def stack_output(self, config: PlatformConfig) -> dict[str, Any]:
        """The `modelRegistry` stack output: per model and version, the registered model, the alias or version the
        stack names and the registry version it resolved to, and the weights; versions pinned in the stack file say
        so. No resolution time: an unchanged registry must leave the outputs unchanged."""
        origin: dict[str, Any] = {"resolvedFrom": self.origin, "trackingUri": self.tracking_uri}
        if self.origin == "recorded":
            origin.update(recordingFile=self.recording_file, recordedAt=self.recorded_at)
        if self.lock_file is not None:
            origin.update(lockFile=self.lock_file, lockDifferences=list(self.lock_differences))
        models = {
            model.name: {
                **{
                    version.name: {"source": "registry", **entry.to_json()}
                    if (entry := self.entry(model.name, version.name)) is not None
                    else {"source": "stack file"}
                    for version in model.versions
                },
                # Its adapters' revisions, by module name (`<adapter>@<revision>`: never a version's name).
                **{
                    name: {"source": "registry", **entry.to_json()}
                    if (entry := self.entry(model.name, name)) is not None
                    else {"source": "stack file"}
                    for name in _adapter_entry_names(config, m_index)
                },
            }
            for m_index, model in enumerate(config.models)
        }
        return {**origin, "models": models}


def _adapter_entry_names(config: PlatformConfig, m_index: int) -> list[str]:
    model = config.models[m_index]
    return [
        adapter_entry_name(config, m_index, a_index, v_index)
        for a_index, adapter in enumerate(model.adapters)
        for v_index in ([None] if adapter.versions is None else range(len(adapter.versions)))
    ]


def registry_references(config: PlatformConfig) -> list[tuple[int, int, MlflowReference]]:
    """(model index, version index, reference) of every version whose source is in the registry."""
    return [
        (m_index, v_index, version.source.mlflow)
        for m_index, model in enumerate(config.models)
        for v_index, version in enumerate(model.versions)
        if version.source.mlflow is not None
    ]


def adapter_registry_references(config: PlatformConfig) -> list[tuple[int, int, int | None, MlflowReference]]:
    """(model index, adapter index, revision index or None for a one-`source` adapter, reference) of every adapter
    revision whose source is in the registry: resolved like a model version's."""
    found: list[tuple[int, int, int | None, MlflowReference]] = []
    for m_index, model in enumerate(config.models):
        for a_index, adapter in enumerate(model.adapters):
            if adapter.source is not None and adapter.source.mlflow is not None:
                found.append((m_index, a_index, None, adapter.source.mlflow))
            for v_index, version in enumerate(adapter.versions or []):
                if version.source.mlflow is not None:
                    found.append((m_index, a_index, v_index, version.source.mlflow))
    return found


def adapter_entry_name(config: PlatformConfig, m_index: int, a_index: int, v_index: int | None) -> str:
    """The name an adapter revision's registry entry goes by beside the model's versions: its LoRA module's
    (`<adapter>` or `<adapter>@<revision>`, never a version name)."""
    adapter = config.models[m_index].adapters[a_index]
    if v_index is None or adapter.versions is None:
        return adapter.name
    return module_name(adapter.name, adapter.versions[v_index].name)


# --- resolving a config -------------------------------------------------------------------


def resolve_registry(
    config: PlatformConfig, token: str | None, *, recording_file: str | None, dry_run: bool, project_dir: Path = PROJECT_DIR
) -> tuple[PlatformConfig, RegistryResolution | None]:
    """The config with every `mlflow` source replaced by the pinned source the registry names, and what each
    resolved to; (config, None) when no version is in the registry. Raises ConfigError naming each reference the
    registry (or the recording) cannot resolve, and under `pulumi up` each answer the lock file does not hold;
    RegistryFileError for a recording or lock file that cannot be used."""
    references = registry_references(config)
    adapter_references = adapter_registry_references(config)
    if not references and not adapter_references:
        return config, None
    settings = config.registry
    if settings.tracking_uri is None:  # the config checks report it (check_registry_sources): not through load_config
        raise ConfigError([ConfigIssue(("registry", "trackingUri"), "is required: versions name sources in the MLflow registry")])
    resolver = _resolver(settings, settings.tracking_uri, token, recording_file, dry_run)
    lock = read_lock(settings, project_dir) if settings.lock_file is not None else None

    answers = _Answers(resolver)
    versions: dict[tuple[str, str], RegistryEntry] = {}
    sources: dict[tuple[int, int], ModelSource] = {}
    for m_index, v_index, reference in references:
        entry = answers.ask(reference, ("models", m_index, "versions", v_index, "source", "mlflow"))
        if entry is not None:
            model = config.models[m_index]
            versions[(model.name, model.versions[v_index].name)] = entry
            sources[(m_index, v_index)] = _source_of(entry)
    adapter_sources: dict[tuple[int, int, int | None], ModelSource] = {}
    for m_index, a_index, revision_index, reference in adapter_references:
        revision_key = ("versions", revision_index) if revision_index is not None else ()
        entry = answers.ask(reference, ("models", m_index, "adapters", a_index, *revision_key, "source", "mlflow"))
        if entry is not None:
            versions[(config.models[m_index].name, adapter_entry_name(config, m_index, a_index, revision_index))] = entry
            adapter_sources[(m_index, a_index, revision_index)] = _source_of(entry)
    if answers.issues:
        raise ConfigError(answers.issues)
    differences = lock_differences(lock[0], lock[1], answers.answered) if lock is not None else []
    if differences and not dry_run:
        raise ConfigError(differences)
    resolved = _with_adapter_sources(_with_sources(config, sources), adapter_sources)
    shown = tuple(str(issue) for issue in differences)
    resolution = _resolution(resolver, settings, versions, project_dir)
    return resolved, replace(resolution, lock_file=settings.lock_file, lock_differences=shown)


def _resolver(
    settings: RegistryConfig, tracking_uri: str, token: str | None, recording_file: str | None, dry_run: bool
) -> LiveRegistry | RecordedRegistry:
    """What answers the references: the recording `recording_file` names (previews only), else the registry at
    `tracking_uri` (never with a token over plain http to another host)."""
    if recording_file:
        if not dry_run:
            raise RegistryFileError(
                f"{REGISTRY_FILE_ENV} is set ({recording_file}): a recorded registry resolution is for previews only, "
                "and `pulumi up` always asks the registry: unset it"
            )
        path = Path(recording_file)
        parsed = read_recording_of(path, settings, "trackingUri", f"the recorded registry resolution {path}")
        return RecordedRegistry(path, parsed)
    if token and in_clear(tracking_uri):
        raise ConfigError(
            [
                ConfigIssue(
                    ("registry", "trackingUri"),
                    f"{tracking_uri!r} is plain http to another host: registryToken would cross the network "
                    "in clear; use https (plain http is for a registry on loopback only)",
                )
            ]
        )
    return LiveRegistry(tracking_uri, settings, token)


class _Answers:
    """The resolver's answer to each reference, asked once however many versions name it."""

    def __init__(self, resolver: LiveRegistry | RecordedRegistry):
        self.resolver = resolver
        self.issues: list[ConfigIssue] = []
        # Each reference answered, under the first key that asked it: what the lock file must hold.
        self.answered: dict[tuple[str, str | None, int | None], tuple[tuple[str | int, ...], RegistryEntry]] = {}
        self._answers: dict[tuple[str, str | None, int | None], RegistryEntry | ConfigIssue] = {}

    def ask(self, reference: MlflowReference, key: tuple[str | int, ...]) -> RegistryEntry | None:
        """The entry the reference resolved to; None when it did not resolve (an issue under `key`). ConfigError
        when the registry cannot answer at all."""
        cached = self._answers.get(reference_of(reference))
        if cached is None:
            try:
                cached = self.resolver.resolve(reference, key)
            except RegistryUnusable as error:
                raise ConfigError([error.issue]) from None
            self._answers[reference_of(reference)] = cached
        if isinstance(cached, ConfigIssue):
            # The same reference in another version: the same answer, under that version's key.
            self.issues.append(ConfigIssue((*key, cached.path[-1]), cached.message))
            return None
        asked = "alias" if reference.alias is not None else "version"
        self.answered.setdefault(reference_of(reference), ((*key, asked), cached))
        return cached


def _source_of(entry: RegistryEntry) -> ModelSource:
    source = pinned_source(entry.weights)
    assert source is not None  # checked where the entry was made
    return source


def _resolution(
    resolver: LiveRegistry | RecordedRegistry,
    settings: RegistryConfig,
    versions: dict[tuple[str, str], RegistryEntry],
    project_dir: Path,
) -> RegistryResolution:
    """Where the references were resolved, and to what."""
    if isinstance(resolver, LiveRegistry):
        return RegistryResolution("live", resolver.tracking_uri, versions)
    # The stack's own lock file goes by the name the stack gives it (never this machine's path to it).
    recorded = resolver.path
    is_lock = settings.lock_file is not None and recorded.resolve() == (project_dir / settings.lock_file).resolve()
    return RegistryResolution(
        "recorded",
        resolver.parsed.tracking_uri,
        versions,
        settings.lock_file if is_lock else str(recorded),
        resolver.parsed.recorded_at,
    )


def _with_sources(config: PlatformConfig, sources: dict[tuple[int, int], ModelSource]) -> PlatformConfig:
    models = [
        model.model_copy(
            update={
                "versions": [
                    version.model_copy(update={"source": sources[(m_index, v_index)]})
                    if (m_index, v_index) in sources
                    else version
                    for v_index, version in enumerate(model.versions)
                ]
            }
        )
        for m_index, model in enumerate(config.models)
    ]
    return config.model_copy(update={"models": models})


def _with_adapter_sources(config: PlatformConfig, sources: dict[tuple[int, int, int | None], ModelSource]) -> PlatformConfig:
    """The config with each adapter revision's registry reference replaced by the pinned source it named."""
    if not sources:
        return config
    models = list(config.models)
    for (m_index, a_index, v_index), source in sources.items():
        model = models[m_index]
        adapters = list(model.adapters)
        adapter = adapters[a_index]
        if v_index is None:
            adapters[a_index] = adapter.model_copy(update={"source": source})
        else:
            revisions = list(adapter.versions or [])
            revisions[v_index] = revisions[v_index].model_copy(update={"source": source})
            adapters[a_index] = adapter.model_copy(update={"versions": revisions})
        models[m_index] = model.model_copy(update={"adapters": adapters})
    return config.model_copy(update={"models": models})
