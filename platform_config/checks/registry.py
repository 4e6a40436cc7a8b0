"""The MLflow model registry: its address where a version names it, the lock file in production, and the serving
aliases, which only the deploy moves."""

from __future__ import annotations

from typing import Iterator

from ..errors import ConfigIssue, format_key
from ..models import PlatformConfig
from ..registry import adapter_registry_references, registry_references

# What a source that names the MLflow registry (a version's, an adapter's) is told on a stack without one.
NO_TRACKING_URI = (
    "names a version in the MLflow registry, but the stack has no 'registry.trackingUri': add "
    "registry: {trackingUri: https://...}"
)


def check_registry_sources(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A version named in the MLflow registry needs the registry's address (`registry`), where the preview and
    `pulumi up` resolve it."""
    if config.registry.tracking_uri is not None:
        return
    for m_index, model in enumerate(config.models):
        for v_index, version in enumerate(model.versions):
            if version.source.mlflow is not None:
                yield ConfigIssue(
                    ("models", m_index, "versions", v_index, "source", "mlflow"),
                    NO_TRACKING_URI,
                )


def check_registry_lock(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """Production deploys only reviewed registry versions: a stack there whose versions or adapters name the
    registry commits what they resolve to (`registry.lockFile`), which `pulumi up` holds the registry's answers to."""
    # Without a tracking URI, check_registry_sources says what is missing first.
    settings = config.registry
    if config.environment != "production" or settings.tracking_uri is None or settings.lock_file is not None:
        return
    models = config.models
    named = sorted(
        {models[m].name for m, _, _ in registry_references(config)}
        | {f"{models[m].name}/{models[m].adapters[a].name}" for m, a, _, _ in adapter_registry_references(config)}
    )
    if named:
        yield ConfigIssue(
            ("registry", "lockFile"),
            f"is required in production: {', '.join(named)} name versions in the MLflow registry; preview live and "
            "commit <out>/registry-resolution.json (e.g. as stacks/Pulumi.<stack>.registry.json), then set lockFile to it",
        )


def check_serving_aliases_are_not_read(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """The serving aliases are the deploy's to move: a version or adapter that took its weights from one would change
    what the stack serves each time a deploy moved it (and `pulumi up` would stop on the lock file's difference)."""
    aliases = config.registry.serving_aliases
    if aliases is None:
        return
    written = {aliases.stable: "stable", aliases.canary: "canary"}
    models = config.models
    read = [(("models", m, "versions", v, "source", "mlflow", "alias"), r) for m, v, r in registry_references(config)]
    read += [
        (("models", m, "adapters", a, *(("versions", rev) if rev is not None else ()), "source", "mlflow", "alias"), r)
        for m, a, rev, r in adapter_registry_references(config)
    ]
    for key, reference in read:
        if reference.alias in written:
            yield ConfigIssue(
                key,
                f"{reference.alias!r} is registry.servingAliases.{written[reference.alias]} ({models[key[1]].name}): the "
                "deploy moves that alias to what it served, so a source may not read it; name the version, or an alias "
                "the model's authors set (e.g. champion)",
            )
    # One alias names one version: a registered model two releases take versions from (two models, a model and an
    # adapter) could be asked for two stable versions at once, which only the deploy's last step would find.
    first: dict[str, tuple[tuple[str | int, ...], str]] = {}
    for key, reference in read:
        m_index, kind, index = key[1], key[2], key[3]
        assert isinstance(m_index, int) and isinstance(index, int)
        unit = models[m_index].name if kind == "versions" else f"{models[m_index].name}/{models[m_index].adapters[index].name}"
        held = first.setdefault(reference.model, (key, unit))
        if held[1] != unit:
            yield ConfigIssue(
                key[:-1] + ("model",),
                f"registered model {reference.model!r} is {held[1]}'s too ({format_key(held[0][:-1])}): with "
                "registry.servingAliases each model and adapter takes its versions from a registered model of its own",
            )
