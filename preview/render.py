"""Turn recorded registrations into the preview's files: resources.json, manifests/, helm/.

Keys are sorted (apiVersion, kind, metadata and a name first): the wire format does not keep
the program's key order, and sorted output makes previews diff cleanly between commits.
"""

from __future__ import annotations

import json
import math
import re
import stat
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii as _json_string  # type: ignore[attr-defined]
from pathlib import Path
from typing import Any, Callable, Iterable

from components.k8s_objects import HELM_RELEASE, YAML_CONFIG_FILE
from components.yaml_text import BlockYaml, JsonDumper

from .engine import PLAIN_SCALARS, SECRET_SIG, SECRET_VALUE, RecordedResource

# Kubernetes resource types that are not objects sent to the API server.
NOT_OBJECTS = (HELM_RELEASE, "kubernetes:helm.sh/v4:Chart", "kubernetes:yaml/v2:ConfigGroup", YAML_CONFIG_FILE)


# The values `_convert` keeps as they are (`_scalar` would return them unchanged; a float may be a whole number, made
# an int): taken as they are, without a call.
_KEPT = PLAIN_SCALARS - {float}


def _convert(value: Any, mark_secrets: bool, secrets: list[bool] | None = None) -> Any:
    """`value` as JSON (see plain and unsecret); each secret met is noted in `secrets`, where given."""
    if isinstance(value, dict):
        if value.get(SECRET_SIG) == SECRET_VALUE:
            if secrets is not None:
                secrets.append(True)
            inner = _convert(value.get("value"), mark_secrets, secrets)
            return {"secret": True, "value": inner} if mark_secrets else inner
        return {
            k: item if type(item) in _KEPT else _convert(item, mark_secrets, secrets)
            for k in sorted(value)
            for item in (value[k],)
        }
    if isinstance(value, (list, tuple)):
        return [item if type(item) in _KEPT else _convert(item, mark_secrets, secrets) for item in value]
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
    return _ordered(unsecret(resource.inputs))


def _ordered(body: dict[str, Any]) -> dict[str, Any]:
    """An object's body (unsecret's) with apiVersion, kind and metadata first, and the name and namespace first in
    its metadata."""
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
    return [_helm_release(r, plain(r.inputs)) for r in resources if r.type == HELM_RELEASE]


def _helm_release(r: RecordedResource, inputs: dict[str, Any]) -> dict[str, Any]:
    """A Helm release as helm/ holds it, from its inputs as JSON (plain's)."""
    return {
        "name": inputs.get("name", r.name),
        "namespace": inputs.get("namespace"),
        "chart": inputs.get("chart"),
        "version": inputs.get("version"),
        "repository": (inputs.get("repositoryOpts") or {}).get("repo"),
        "values": inputs.get("values") or {},
    }


class DuplicateObjectError(Exception):
    """Two resources declare the same Kubernetes object: one would overwrite the other."""


class _Dumper(JsonDumper):
    """A string of several lines as a literal block: a manifest's scripts and configs read as written."""

    multiline_style = "|"


# The manifests' and Helm releases' writer: libyaml's text, each scalar's asked of it once (components/yaml_text.py).
_YAML = BlockYaml(_Dumper, width=120)


def to_yaml(data: Any) -> str:
    """`yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120)`, byte for byte."""
    return _YAML.dump(data)


@dataclass
class Rendered:
    """What the rendering wrote and what the checks read: the Kubernetes objects (manifests/), the Helm releases
    (helm/), and every custom resource's inputs as the API server receives them, by URN (unsecret's), which the
    first-`up` stage reads rather than converting them again."""

    objects: list[dict[str, Any]]
    releases: list[dict[str, Any]]
    api_inputs: dict[str, dict[str, Any]]


def write_outputs(out: Path, resources: list[RecordedResource]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Write resources.json, manifests/ and helm/; return (manifests, helm releases)."""
    rendered = render(out, resources)
    return rendered.objects, rendered.releases


def render(out: Path, resources: list[RecordedResource]) -> Rendered:
    """Write resources.json, manifests/ and helm/. Each resource's inputs are converted once: without a secret in
    them, plain's JSON and unsecret's are the same (they differ only in a secret's marker), and the object, its
    Helm release and resources.json share it (the manifests reorder only its top level and its metadata). Two
    resources declaring one object fail it before anything is written."""
    out.mkdir(parents=True, exist_ok=True)
    entries, objects, releases, api_inputs = [], [], [], {}
    for r in resources:
        secrets: list[bool] = []
        inputs = _convert(r.inputs, True, secrets)
        entries.append({"type": r.type, "name": r.name, "urn": r.urn, "parent": r.parent, "custom": r.custom, "inputs": inputs})
        if not r.custom:
            continue
        body = api_inputs[r.urn] = unsecret(r.inputs) if secrets else inputs
        if is_kubernetes_object(r):
            objects.append(_ordered(body))
        if r.type == HELM_RELEASE:
            releases.append(_helm_release(r, inputs))
    files: dict[Path, dict[str, Any]] = {}
    for obj in objects:
        filename = manifest_filename(obj)
        path = out / "manifests" / filename
        if path in files:
            raise DuplicateObjectError(f"two resources declare the same object {filename.removesuffix('.yaml')}")
        files[path] = obj
    for release in releases:
        files[out / "helm" / f"{_safe(release['namespace'] or 'default')}.{_safe(release['name'])}.yaml"] = release
    write_indented(out / "resources.json", entries)
    del entries  # what the objects and releases do not share is garbage now
    write_folders(out, files, to_yaml)
    return Rendered(objects, releases, api_inputs)


# The folders of files, one per object, that each preview writes anew.
FOLDERS = ("manifests", "helm")


def write_folders(out: Path, files: dict[Path, Any], text: Callable[[Any], str]) -> None:
    """manifests/ and helm/ holding each of `files` as its `text` (made one at a time, as it is written): a file
    the last preview wrote as it is now is left as it is, one that differs is written, one this preview does not
    write is deleted (and a folder left empty). Not all deleted first and written anew, as they were: on this
    project's machines (ext4, mounted with `discard`) files made just after thousands were deleted took ten times as
    long as in a new folder (2.5 s against 0.2 s for the 3,461 objects of 100 models; the cause in the kernel not
    traced further), and a file that is the same keeps its modification time for whatever watches the folder."""
    for name in FOLDERS:
        folder = out / name
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            folder.unlink()
        for path in sorted(folder.rglob("*"), reverse=True) if folder.exists() else ():
            if path.is_dir() and not path.is_symlink():
                if not any(path.iterdir()):
                    path.rmdir()
            elif path not in files or path.is_symlink():
                path.unlink()
    made: set[Path] = set()
    for path, value in files.items():
        data = text(value).encode()
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(path.parent)
        if _holds(path, data):
            continue
        # Made anew rather than written through: a file the user made read-only or linked elsewhere (a hard link to
        # the last preview's) is replaced, not changed or refused. (A folder at its path went in the sweep above.)
        path.unlink(missing_ok=True)
        path.write_bytes(data)


def _holds(path: Path, data: bytes) -> bool:
    """Whether `path` is a regular file (not a link, a pipe or a folder) that holds `data` and can be read."""
    try:
        status = path.lstat()
        return stat.S_ISREG(status.st_mode) and status.st_size == len(data) and path.read_bytes() == data
    except OSError:
        return False


def write_indented(path: Path, items: list[Any]) -> None:
    """`json.dumps(items, indent=2)` and a newline into `path`, byte for byte, written item by item: the whole text
    of a large stack's resources.json (and the list of its pieces) is never held at once."""
    with path.open("w") as file:
        try:
            separator = "[\n  "
            for item in items:
                pieces: list[str] = [separator]
                _encode(item, pieces.append, "\n  ")
                file.write("".join(pieces))
                separator = ",\n  "
        except _NotJson:
            file.seek(0)
            file.truncate()
            file.write(json.dumps(items, indent=2) + "\n")
            return
        file.write("\n]\n" if items else "[]\n")


def dumps_indented(value: Any) -> str:
    """`json.dumps(value, indent=2)`, byte for byte, for JSON data (dicts with string keys, lists, strings, numbers,
    booleans, None): the standard library encodes with indentation in pure Python, through a generator per
    container; this appends to one list, about twice as fast. Anything else is left to json.dumps."""
    out: list[str] = []
    try:
        _encode(value, out.append, "\n")
    except _NotJson:
        return json.dumps(value, indent=2)
    return "".join(out)


class _NotJson(Exception):
    pass


def _encode(value: Any, add: Callable[[str], Any], newline: str) -> None:
    """json.encoder's _make_iterencode with indent 2 and separators (",", ": "), its defaults with an indent."""
    if isinstance(value, str):
        add(_json_string(value))
    elif isinstance(value, dict):
        if not value:
            add("{}")
            return
        inner = newline + "  "
        separator = "{" + inner
        for key, item in value.items():
            if not isinstance(key, str):
                raise _NotJson
            add(separator)
            add(_json_string(key))
            add(": ")
            _encode(item, add, inner)
            separator = "," + inner
        add(newline + "}")
    elif isinstance(value, list):
        if not value:
            add("[]")
            return
        inner = newline + "  "
        separator = "[" + inner
        for item in value:
            add(separator)
            _encode(item, add, inner)
            separator = "," + inner
        add(newline + "]")
    elif value is None:
        add("null")
    elif value is True:
        add("true")
    elif value is False:
        add("false")
    elif type(value) is int:
        add(int.__repr__(value))
    elif type(value) is float and math.isfinite(value):
        add(float.__repr__(value))
    else:
        raise _NotJson
