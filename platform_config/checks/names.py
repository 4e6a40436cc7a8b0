"""Names: unique within their block, clear of the platform's namespaces, and not colliding once combined into
the names of the objects and Pulumi components built from them."""

from __future__ import annotations

from typing import Iterator

from ..errors import ConfigIssue
from ..models import SYSTEM_POOL_NAME, PlatformConfig
from ..namespaces import RESERVED_NAMESPACES
from ..serving import server_name


def check_unique_names(config: PlatformConfig) -> Iterator[ConfigIssue]:
    for key, names in (
        ("nodePools", [p.name for p in config.node_pools]),
        ("tenants", [t.name for t in config.tenants]),
        ("models", [m.name for m in config.models]),
    ):
        for index, name in duplicates(names):
            yield ConfigIssue((key, index, "name"), f"duplicate name {name!r}: names must be unique within {key}")
    for index, name in duplicates([m.openai_name for m in config.models]):
        yield ConfigIssue(
            ("models", index, "servedModelName"),
            f"served model name {name!r} is already used by another model: clients select models by it",
        )
    for m_index, model in enumerate(config.models):
        for v_index, name in duplicates([v.name for v in model.versions]):
            yield ConfigIssue(("models", m_index, "versions", v_index, "name"), f"duplicate version name {name!r}")
    for index, pool in enumerate(config.node_pools):
        if pool.name == SYSTEM_POOL_NAME:
            yield ConfigIssue(
                ("nodePools", index, "name"),
                f"{SYSTEM_POOL_NAME!r} is the system node group's pool label: name the GPU pool otherwise",
            )
    for index, tenant in enumerate(config.tenants):
        if tenant.name in RESERVED_NAMESPACES:
            yield ConfigIssue(
                ("tenants", index, "name"),
                f"{tenant.name!r} is a namespace the platform or Kubernetes uses; reserved: "
                f"{', '.join(sorted(RESERVED_NAMESPACES))}",
            )


def duplicates(names: list[str]) -> Iterator[tuple[int, str]]:
    seen: set[str] = set()
    for index, name in enumerate(names):
        if name in seen:
            yield index, name
        seen.add(name)


def check_object_names(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """Names built from model and version names must not collide within a namespace
    (`qwen` + `small-v1` and `qwen-small` + `v1` both make `qwen-small-v1`)."""
    seen: dict[tuple[str, str], tuple[int, str]] = {}
    for index, model in enumerate(config.models):
        names: list[tuple[str, tuple[str | int, ...]]] = [(model.name, ("models", index, "name"))]
        names += [(server_name(model, v.name), ("models", index, "versions", i, "name")) for i, v in enumerate(model.versions)]
        for name, path in names:
            key = (model.tenant, name)
            if key in seen and seen[key][0] != index:
                other = config.models[seen[key][0]].name
                yield ConfigIssue(
                    path,
                    f"objects named {name!r} would collide in namespace {model.tenant!r} with model {other!r}'s: "
                    "rename the model or the version",
                )
            seen.setdefault(key, (index, name))


def check_server_component_names(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A version's server is a Pulumi component named `<model>-<version>`, and a URN holds the
    name and the type chain, not the namespace: servers of one name in two tenants would share a
    URN, which the engine refuses."""
    seen: dict[str, int] = {}
    for index, model in enumerate(config.models):
        for v_index, version in enumerate(model.versions):
            name = server_name(model, version.name)
            first = seen.setdefault(name, index)
            other = config.models[first]
            # Same tenant: check_object_names reports it; same model name: check_unique_names.
            if first != index and other.tenant != model.tenant and other.name != model.name:
                yield ConfigIssue(
                    ("models", index, "versions", v_index, "name"),
                    f"this version's server would be named {name!r}, like a server of model {other.name!r} (tenant "
                    f"{other.tenant!r}): server names are unique across tenants; rename the model or the version",
                )
