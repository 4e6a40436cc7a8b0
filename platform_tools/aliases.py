"""The registry says what an environment serves: after `pulumi up`, the stack's serving aliases
(`registry.servingAliases`) are moved to the registry versions its outputs say it deployed.

What is read: the stack's outputs as deployed (`pulumi stack output --json`): `canaryReleases`
(per model: `stable`, `canary`, `canaryWeight`, and per adapter the same of its revisions) and
`modelRegistry` (per model, per version name or LoRA module name: the registered model and the
registry version it resolved to, or `"source": "stack file"` for weights pinned in the stack).
Only what the deploy resolved is used, never the registry's present answers: the aliases follow
the cluster, not the other way round.

What is wanted, per registered model `R` a model (or one of its adapters) takes versions from:
- the stable alias on the registry version its stable version (revision) serves, where that is in `R`;
- the canary alias on the version its canary serves while `canaryWeight` is above 0, where that is in `R`;
- neither alias anywhere else in `R`: a rolled-back canary (weight 0) or a promoted one (now
  stable, no canary) leaves the canary alias removed, and an old stable's registered model loses
  the stable alias.
Two models that want the same alias of one registered model on two versions are refused (exit 2):
one alias names one version.

MLflow's REST API (`/api/2.0/mlflow/registered-models/alias`: GET, POST, DELETE; mlflow/server/
handlers.py and mlflow/protos/model_registry.proto at v3.17.2) through the registry client the
preview resolves with (platform_config/registry/client.py LiveRegistry), with the same bounds: no
redirects, a deadline per request, no token in clear to another host, no token in any message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from platform_config.adapters import module_name
from platform_config.models import PlatformConfig
from platform_config.registry import LiveRegistry
from platform_config.release import Release, ReleaseRecordError, from_output

REGISTRY_OUTPUT = "modelRegistry"
RELEASES_OUTPUT = "canaryReleases"


class AliasInputError(Exception):
    """Outputs the aliases cannot be taken from: exit 2 with this message."""


@dataclass(frozen=True)
class WantedAlias:
    """One alias of one registered model as the deploy left it: on `version`, or on none."""

    registered_model: str
    alias: str
    version: str | None
    # What it names, e.g. `summarizer/v2 (canary at 10%)`; for a removal, why.
    because: str


@dataclass(frozen=True)
class AliasMove:
    wanted: WantedAlias
    # What the registry said before: the version the alias was on, None when it was on none.
    was: str | None

    @property
    def changes(self) -> bool:
        return self.was != self.wanted.version

    def text(self) -> str:
        w = self.wanted
        before = f"version {self.was}" if self.was is not None else "no version"
        after = f"version {w.version}" if w.version is not None else "no version (removed)"
        verb = "moved" if self.changes else "unchanged"
        return f"{w.registered_model} @{w.alias}: {verb}, {before} -> {after}: {w.because}"


@dataclass(frozen=True)
class _Unit:
    """What one release serves: a model's versions, or one adapter's revisions."""

    who: str
    release: Release
    # The registry entry (registered model, registry version) of each of its versions (revisions) that has one.
    entries: dict[str, tuple[str, str]]


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise AliasInputError(f"the stack output {where} is not an object")
    return value


def _registry_entry(entries: Mapping[str, Any], model: str, name: str, from_registry: bool) -> tuple[str, str] | None:
    """(registered model, registry version) of one of the model's entries; None for weights pinned in the stack file.
    An entry the stack file takes from the registry but the outputs lack (or record as pinned) is not this stack file
    deployed: refused, never read as "no version" (that would remove the version's aliases)."""
    where = f"{REGISTRY_OUTPUT}.models.{model}.{name}"
    entry = _mapping(entries.get(name, {}), where)
    if entry.get("source") != "registry":
        if from_registry:
            raise AliasInputError(f"the stack output {where} is not the registry version the stack file names: deploy it first")
        return None
    registered, version = entry.get("registeredModel"), entry.get("registryVersion")
    if not isinstance(registered, str) or not registered or not isinstance(version, str) or not version.isdigit():
        raise AliasInputError(f"the stack output {where} has no registeredModel and registryVersion (a version number)")
    return registered, version


def _of_declared(release: Release | None, where: str, declared: set[str], problem: str = "") -> Release:
    """`release` when it is one of the stack file's versions (the deploy just applied this stack file)."""
    if release is None or release.stable not in declared or not (release.canary is None or release.canary in declared):
        raise AliasInputError(
            f"the stack output {where} is not a release of the stack file's versions ({', '.join(sorted(declared))}): "
            f"deploy this stack file first{problem}"
        )
    return release


def _release(value: Any, where: str, declared: set[str]) -> Release:
    """A deployed release (platform_config/release.py's output form) whose versions the stack file declares."""
    try:
        return _of_declared(from_output(value, where), where, declared)
    except ReleaseRecordError as error:
        return _of_declared(None, where, declared, f" ({error})")


def _units(outputs: Mapping[str, Any], config: PlatformConfig) -> list[_Unit]:
    """Each model's and each adapter's release as deployed, with the registry entries of the versions the stack file
    declares (the deploy just applied this stack file: its versions are the deployed ones)."""
    releases = _mapping(outputs.get(RELEASES_OUTPUT), RELEASES_OUTPUT)
    by_model = _mapping(_mapping(outputs.get(REGISTRY_OUTPUT), REGISTRY_OUTPUT).get("models"), f"{REGISTRY_OUTPUT}.models")
    units: list[_Unit] = []
    for model in config.models:
        if model.name not in releases:
            raise AliasInputError(f"the stack output {RELEASES_OUTPUT} has no {model.name!r}: deploy this stack file first")
        where = f"{RELEASES_OUTPUT}.{model.name}"
        release = _release(releases[model.name], where, {v.name for v in model.versions})
        entries = _mapping(by_model.get(model.name, {}), f"{REGISTRY_OUTPUT}.models.{model.name}")
        found = {v.name: _registry_entry(entries, model.name, v.name, v.source.mlflow is not None) for v in model.versions}
        units.append(_Unit(model.name, release, {name: entry for name, entry in found.items() if entry is not None}))
        adapter_releases = release.adapters or {}
        for adapter in model.adapters:
            who = f"{model.name}/{adapter.name}"
            if adapter.versions is None:
                # One `source`, served whenever the model is: its only revision is always the stable one.
                assert adapter.source is not None
                entry = _registry_entry(entries, model.name, adapter.name, adapter.source.mlflow is not None)
                one = Release(adapter.name)
                units.append(_Unit(who, one, {adapter.name: entry} if entry is not None else {}))
                continue
            revisions = {
                v.name: _registry_entry(entries, model.name, module_name(adapter.name, v.name), v.source.mlflow is not None)
                for v in adapter.versions
            }
            declared = {v.name for v in adapter.versions}
            units.append(
                _Unit(
                    who,
                    _of_declared(adapter_releases.get(adapter.name), f"{where}.adapters.{adapter.name}", declared),
                    {name: entry for name, entry in revisions.items() if entry is not None},
                )
            )
    return units


def _registered_models(outputs: Mapping[str, Any] | None) -> set[str]:
    """Every registered model a stack's `modelRegistry` output names (none without one)."""
    registry = outputs.get(REGISTRY_OUTPUT) if isinstance(outputs, Mapping) else None
    models = registry.get("models") if isinstance(registry, Mapping) else None
    found: set[str] = set()
    for entries in (models or {}).values() if isinstance(models, Mapping) else ():
        for entry in entries.values() if isinstance(entries, Mapping) else ():
            if isinstance(entry, Mapping) and entry.get("source") == "registry" and isinstance(entry.get("registeredModel"), str):
                found.add(entry["registeredModel"])
    return found


def wanted_aliases(outputs: Any, config: PlatformConfig, previous: Any = None) -> list[WantedAlias]:
    """Every serving alias of every registered model the deployed stack takes versions from, as the deploy left it,
    and of those the stack took versions from before (`previous`: its outputs before this deploy), which it no longer
    does: on none. In a stable order; none when the stack has no serving aliases. AliasInputError for outputs that are
    not this stack file's as deployed, or that want one alias on two versions."""
    aliases = config.registry.serving_aliases
    outputs = _mapping(outputs, "(all of them)")
    if aliases is None:
        return []
    wanted: dict[tuple[str, str], WantedAlias] = {}

    def want(item: WantedAlias) -> None:
        key = (item.registered_model, item.alias)
        held = wanted.get(key)
        if held is not None and held.version is not None and item.version is not None and held.version != item.version:
            raise AliasInputError(
                f"registered model {item.registered_model!r}: alias {item.alias!r} would name version {held.version} "
                f"({held.because}) and version {item.version} ({item.because}); one alias names one version: give "
                "each model a registered model of its own"
            )
        if held is None or held.version is None:
            wanted[key] = item

    units = _units(outputs, config) if outputs.get(REGISTRY_OUTPUT) is not None else []
    for unit in units:
        stable, canary, weight = unit.release.stable, unit.release.canary, unit.release.canary_weight
        serving = {
            aliases.stable: (unit.entries.get(stable), f"{unit.who}/{stable}, stable"),
            aliases.canary: (
                unit.entries.get(canary) if canary is not None and weight > 0 else None,
                f"{unit.who}/{canary}, canary at {weight}%",
            ),
        }
        gone = {aliases.stable: "its stable version is not in this registered model", aliases.canary: "no canary takes traffic"}
        for registered in sorted({registered for registered, _ in unit.entries.values()}):
            for alias, (entry, shown) in serving.items():
                if entry is not None and entry[0] == registered:
                    want(WantedAlias(registered, alias, entry[1], shown))
                else:
                    want(WantedAlias(registered, alias, None, f"{unit.who}: {gone[alias]}"))
    for registered in sorted(_registered_models(previous) - {r for r, _ in wanted}):
        for alias in (aliases.stable, aliases.canary):
            want(WantedAlias(registered, alias, None, "the stack no longer takes versions from it"))
    return [wanted[key] for key in sorted(wanted)]


def move_aliases(registry: LiveRegistry, wanted: list[WantedAlias], *, write: bool) -> list[AliasMove]:
    """Each alias as the registry has it and where it goes; with `write`, moved there. RegistryUnusable when the
    registry cannot answer or refuses a change (the moves before it stay made: each is whole on its own, and a
    rerun makes the rest)."""
    moves: list[AliasMove] = []
    for item in wanted:
        move = AliasMove(item, registry.alias_version(item.registered_model, item.alias))
        if write and move.changes:
            if item.version is None:
                registry.delete_alias(item.registered_model, item.alias)
            else:
                registry.set_alias(item.registered_model, item.alias, item.version)
        moves.append(move)
    return moves
