"""Turn recorded registrations into the preview's files: resources.json, manifests/, helm/.

Keys are sorted (apiVersion, kind, metadata and a name first): the wire format does not keep
the program's key order, and sorted output makes previews diff cleanly between commits.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable

import yaml

from .engine import SECRET_SIG, SECRET_VALUE, RecordedResource

HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
# Kubernetes resource types that are not objects sent to the API server.
NOT_OBJECTS = (HELM_RELEASE, "kubernetes:helm.sh/v4:Chart", "kubernetes:yaml/v2:ConfigGroup", "kubernetes:yaml/v2:ConfigFile")


def _convert(value: Any, mark_secrets: bool) -> Any:
    if isinstance(value, dict):
        if value.get(SECRET_SIG) == SECRET_VALUE:
            inner = _convert(value.get("value"), mark_secrets)
            return {"secret": True, "value": inner} if mark_secrets else inner
        return {k: _convert(value[k], mark_secrets) for k in sorted(value)}
    if isinstance(value, (list, tuple)):
        return [_convert(v, mark_secrets) for v in value]
    return _scalar(value)


def plain(value: Any) -> Any:
    """Inputs as JSON: secrets become {"secret": true, "value": <placeholder>}, unknowns null."""
    return _convert(value, mark_secrets=True)


def unsecret(value: Any) -> Any:
    """Inputs as the API server receives them: secret markers dropped (placeholders stay)."""
    return _convert(value, mark_secrets=False)


def _scalar(value: Any) -> Any:
    # Pulumi's wire format carries every number as a double; the provider turns whole numbers
    # back into integers, and so do we.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return None  # an unknown output value at preview


def resource_entries(resources: Iterable[RecordedResource]) -> list[dict[str, Any]]:
    return [
        {
            "type": r.type,
            "name": r.name,
            "urn": r.urn,
            "parent": r.parent,
            "custom": r.custom,
            "inputs": plain(r.inputs),
        }
        for r in resources
    ]


def is_kubernetes_object(resource: RecordedResource) -> bool:
    return resource.custom and resource.type.startswith("kubernetes:") and resource.type not in NOT_OBJECTS


def manifest(resource: RecordedResource) -> dict[str, Any]:
    """The object the API server receives: apiVersion, kind, metadata, then the rest."""
    body = unsecret(resource.inputs)
    ordered = {key: body[key] for key in ("apiVersion", "kind", "metadata") if key in body}
    ordered.update({k: v for k, v in body.items() if k not in ordered})
    metadata = ordered.get("metadata")
    if isinstance(metadata, dict):
        first = {key: metadata[key] for key in ("name", "namespace") if key in metadata}
        ordered["metadata"] = {**first, **{k: v for k, v in metadata.items() if k not in first}}
    return ordered


def manifests(resources: Iterable[RecordedResource]) -> list[dict[str, Any]]:
    return [manifest(r) for r in resources if is_kubernetes_object(r)]


def manifest_filename(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace") or "_cluster"
    name = metadata.get("name") or "unnamed"
    group = obj.get("apiVersion", "v1").split("/")[0] if "/" in obj.get("apiVersion", "") else "core"
    return f"{_safe(namespace)}/{_safe(obj.get('kind', 'Object'))}.{_safe(group)}.{_safe(name)}.yaml"


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", str(text))


def chart_name(chart: str) -> str:
    """A release's chart by name: a chart from an OCI registry is named by its reference
    (oci://registry/path/<chart>)."""
    return chart.rsplit("/", 1)[-1]


def helm_releases(resources: Iterable[RecordedResource]) -> list[dict[str, Any]]:
    releases = []
    for r in resources:
        if r.type != HELM_RELEASE:
            continue
        inputs = plain(r.inputs)
        releases.append(
            {
                "name": inputs.get("name", r.name),
                "namespace": inputs.get("namespace"),
                "chart": inputs.get("chart"),
                "version": inputs.get("version"),
                "repository": (inputs.get("repositoryOpts") or {}).get("repo"),
                "values": inputs.get("values") or {},
            }
        )
    return releases


# libyaml's emitter when PyYAML has it (it does in the pinned wheel): several times faster.
class DuplicateObjectError(Exception):
    """Two resources declare the same Kubernetes object: one would overwrite the other."""


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    pass


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str_presenter)


def to_yaml(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120)


def write_outputs(out: Path, resources: list[RecordedResource]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Write resources.json, manifests/ and helm/; return (manifests, helm releases)."""
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("manifests", "helm"):
        _clear(out / stale)
    (out / "resources.json").write_text(json.dumps(resource_entries(resources), indent=2) + "\n")
    objects = manifests(resources)
    seen: set[str] = set()
    for obj in objects:
        filename = manifest_filename(obj)
        if filename in seen:
            raise DuplicateObjectError(f"two resources declare the same object {filename.removesuffix('.yaml')}")
        seen.add(filename)
        path = out / "manifests" / filename
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(to_yaml(obj))
    releases = helm_releases(resources)
    for release in releases:
        path = out / "helm" / f"{_safe(release['namespace'] or 'default')}.{_safe(release['name'])}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(to_yaml(release))
    return objects, releases


def _clear(directory: Path) -> None:
    if not directory.exists():
        return
    for path in sorted(directory.rglob("*"), reverse=True):
        if path.is_file():
            path.unlink()
        else:
            path.rmdir()
