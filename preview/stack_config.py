"""Read Pulumi.yaml and stacks/Pulumi.<stack>.yaml the way the Pulumi CLI hands config to a program.

The CLI gives a Python program every config value as a string keyed `namespace:key`, objects and
lists JSON-encoded, and a list of the keys that hold secrets. Secure values cannot be decrypted
here (no passphrase, no KMS), so they become placeholders that stay marked secret.
"""

from __future__ import annotations

import json
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import yaml

from platform_config.credentials import ANY_CREDENTIAL

# libyaml's parser where PyYAML was built with it (about 12 times faster on prod's stack file), with the same safe
# constructors and the resolvers below (yaml/cyaml.py CSafeLoader: CParser, SafeConstructor, Resolver); the bounds
# are checked on its events as on the pure-Python parser's (_check_events).
_SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StackFileLoader(_SAFE_LOADER):  # type: ignore[valid-type,misc]
    """YAML as the Pulumi CLI (Go, YAML 1.2) reads it: `2024-06-01`, `on`, `yes` and `1:30`
    stay strings; only true/false are booleans."""


_StackFileLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in ("tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:bool")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_StackFileLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
for _first, _resolvers in _StackFileLoader.yaml_implicit_resolvers.items():
    _StackFileLoader.yaml_implicit_resolvers[_first] = [
        (tag, regexp)
        if tag != "tag:yaml.org,2002:int"
        else (tag, re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"))
        for tag, regexp in _resolvers
    ]


# Bounds on a stack file, far above any real one (ours are a few KB, 8 levels deep, a few hundred
# values) and far below what would exhaust the preview. The Go YAML decoder the Pulumi CLI reads
# stack files with refuses excessive aliasing and duplicate keys too (gopkg.in/yaml.v3 v3.0.1
# decode.go: "document contains excessive aliasing"; `uniqueKeys` on by default, "mapping key %q
# already defined at line %d", keys compared by their text whatever their quoting).
# A real stack file is a few KB, read and checked in about 15 ms with libyaml (175 ms with the pure-Python parser);
# the benchmark's largest, 1,000 models across 100 tenants, is about 410 KB (issue 30 previews it). Past this bound
# the file is refused unread; below it, MAX_VALUES bounds the work (refused at 100,000 values in under 0.5 s;
# the 1,000-model file is read in 0.7 s).
MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 32
# Values after alias expansion: what the config strings and the pydantic models will hold.
MAX_VALUES = 100_000
# Digits of a number: Python refuses to parse more than 4300, Kubernetes fields hold 19 at most.
MAX_NUMBER_CHARS = 40

_TAG = "tag:yaml.org,2002:"
# Tags a config value may carry; a key is a string (or YAML's merge key `<<`).
_SCALAR_TAGS = {_TAG + name for name in ("str", "int", "float", "bool", "null")}
_COLLECTION_TAGS = {_TAG + "seq", _TAG + "map"}
_KEY_TAGS = {_TAG + "str", _TAG + "merge"}
_JSON_TYPES = "config values are strings, numbers, true/false, null, lists and mappings"


class StackConfigError(Exception):
    """The project or stack file itself cannot be read (not a config-value problem)."""


@dataclass
class _Open:
    """A mapping or list being read: where it is and what it has held so far."""

    is_mapping: bool
    anchor: str | None
    values_before: int
    keys: set[str] = field(default_factory=set)
    awaiting_key: bool = True
    key: str | int | None = None
    index: int = -1


def _where(path: list[_Open], line: int) -> str:
    """`inference-platform:models[0].release (line 12)`: the key the event belongs to."""
    parts = [frame.key for frame in path if frame.key is not None]
    if parts[:1] == ["config"] and len(parts) > 1:
        parts = parts[1:]  # under `config:` the config key itself names the value
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return f"{text or 'the top level'} (line {line})"


def _check_events(loader: yaml.SafeLoader) -> None:
    """Walk the file's parse events (a state machine, no recursion) and refuse what would crash,
    hang or silently mislead the loader: depth, aliases expanding without bound, recursive
    aliases, duplicate or non-string keys, tags outside JSON's types, overlong numbers."""
    path: list[_Open] = []
    anchor_sizes: dict[str, int] = {}
    values = 0
    documents = 0

    def fail(event: yaml.Event, message: str) -> NoReturn:
        line = event.start_mark.line + 1 if event.start_mark is not None else 0
        raise StackConfigError(f"{_where(path, line)}: {message}")

    def node_started(event: yaml.Event) -> None:
        if not path:
            return
        frame = path[-1]
        if not frame.is_mapping:
            frame.index += 1
            frame.key = frame.index
        elif frame.awaiting_key:
            if not isinstance(event, yaml.ScalarEvent):
                fail(event, "a key must be a plain string, not a list, mapping or alias")
            tag = _scalar_tag(loader, event)
            if tag not in _KEY_TAGS:
                fail(event, f"key {event.value!r} is not a string (YAML reads it as {_tag_name(tag)}); quote it")
            frame.key = event.value
            if event.value in frame.keys:
                fail(event, f"duplicate key {event.value!r}: each key may appear once (the Pulumi CLI refuses it too)")
            frame.keys.add(event.value)

    def node_ended() -> None:
        if path and path[-1].is_mapping:
            frame = path[-1]
            frame.awaiting_key = not frame.awaiting_key

    while loader.check_event():
        event = loader.get_event()
        if isinstance(event, yaml.DocumentStartEvent):
            documents += 1
            if documents > 1:
                fail(event, "the file holds more than one YAML document; a stack file is one mapping")
        elif isinstance(event, yaml.AliasEvent):
            node_started(event)
            if event.anchor in {frame.anchor for frame in path}:
                fail(event, f"alias *{event.anchor} refers to a value that contains it (a recursive alias)")
            size = anchor_sizes.get(event.anchor or "")
            if size is None:
                fail(event, f"alias *{event.anchor} names no anchor defined before it")
            values += size
            node_ended()
        elif isinstance(event, yaml.ScalarEvent):
            is_key = bool(path) and path[-1].is_mapping and path[-1].awaiting_key
            node_started(event)
            values += 1
            tag = _scalar_tag(loader, event)
            if not is_key and tag not in _SCALAR_TAGS:
                fail(event, f"tag {_tag_name(tag)} is not allowed: {_JSON_TYPES}")
            if tag in (_TAG + "int", _TAG + "float") and len(event.value) > MAX_NUMBER_CHARS:
                fail(event, f"a number of {len(event.value)} characters; at most {MAX_NUMBER_CHARS} are read")
            if event.anchor is not None:
                anchor_sizes[event.anchor] = 1
            node_ended()
        elif isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            node_started(event)
            values += 1
            if event.tag is not None and event.tag != "!" and event.tag not in _COLLECTION_TAGS:
                fail(event, f"tag {_tag_name(event.tag)} is not allowed: {_JSON_TYPES}")
            path.append(_Open(isinstance(event, yaml.MappingStartEvent), event.anchor, values - 1))
            if len(path) > MAX_DEPTH:
                fail(event, f"nested more than {MAX_DEPTH} levels deep")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            frame = path.pop()
            if frame.anchor is not None:
                anchor_sizes[frame.anchor] = values - frame.values_before
            node_ended()
        if values > MAX_VALUES:
            fail(event, f"holds more than {MAX_VALUES} values, aliases expanded; a stack file holds a few hundred")


def _tag_name(tag: str) -> str:
    return "!!" + tag.removeprefix(_TAG) if tag.startswith(_TAG) else tag


def _scalar_tag(loader: yaml.SafeLoader, event: yaml.ScalarEvent) -> str:
    if event.tag is not None and event.tag != "!":
        return str(event.tag)
    return str(loader.resolve(yaml.ScalarNode, event.value, event.implicit))


def load_yaml(text: str) -> Any:
    """A stack file's YAML, refused with StackConfigError (naming the key and line) when it is not
    valid YAML or would exceed the bounds above."""
    if len(text.encode()) > MAX_FILE_BYTES:
        raise StackConfigError(f"the file is larger than {MAX_FILE_BYTES} bytes; a stack file is a few KB")
    try:
        loader = _StackFileLoader(text)
        try:
            _check_events(loader)
        finally:
            loader.dispose()
        # Checked: bounded in depth and size, no recursion, only JSON's types.
        return yaml.load(text, Loader=_StackFileLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as error:
        # PyYAML quotes the offending line: a credential on it is masked.
        raise StackConfigError(f"not valid YAML: {ANY_CREDENTIAL.sub('***', str(error))}") from None


def read_bounded(path: Path, limit: int, hint: str) -> bytes:
    """A regular file's bytes, reading no more than `limit`: a FIFO would block the open, a device
    such as /dev/zero never ends."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            raise StackConfigError(f"cannot read {path}: not a regular file")
        with path.open("rb") as file:
            data = file.read(limit + 1)
    except OSError as error:
        raise StackConfigError(f"cannot read {path}: {error.strerror or error}") from None
    if len(data) > limit:
        raise StackConfigError(f"{path}: the file is larger than {limit} bytes; {hint}")
    return data


def read_yaml_file(path: Path) -> Any:
    """A YAML file as load_yaml reads it, its size bounded before it is read and its bytes UTF-8."""
    data = read_bounded(path, MAX_FILE_BYTES, "a stack file is a few KB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise StackConfigError(f"{path}: line {line}: the file is not UTF-8 (byte {error.start})") from None
    try:
        return load_yaml(text)
    except StackConfigError as error:
        raise StackConfigError(f"{path}: {error}") from None


@dataclass(frozen=True)
class ProjectFile:
    root: Path
    name: str
    stack_config_dir: Path
    config_schema: dict[str, Any]

    def stacks(self) -> list[str]:
        return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in self.stack_config_dir.glob("Pulumi.*.yaml"))


@dataclass
class StackConfig:
    project: str
    stack: str
    # "namespace:key" -> string value, exactly as the CLI passes PULUMI_CONFIG.
    values: dict[str, str] = field(default_factory=dict)
    secret_keys: list[str] = field(default_factory=list)


def load_project(root: Path) -> ProjectFile:
    path = root / "Pulumi.yaml"
    data = read_yaml_file(path)
    if not isinstance(data, dict) or "name" not in data:
        raise StackConfigError(f"{path} has no project name")
    return ProjectFile(
        root=root,
        name=str(data["name"]),
        stack_config_dir=root / str(data.get("stackConfigDir", ".")),
        config_schema=dict(data.get("config") or {}),
    )


def secret_placeholder(key: str) -> str:
    return f"[secret:{key}]"


def load_stack_config(project: ProjectFile, stack: str, path: Path | None = None) -> StackConfig:
    """`path` overrides the stack file (default: <stackConfigDir>/Pulumi.<stack>.yaml)."""
    path = path or project.stack_config_dir / f"Pulumi.{stack}.yaml"
    if not path.exists():
        known = ", ".join(project.stacks()) or "none"
        raise StackConfigError(f"no stack file {path} (stacks: {known})")
    data = read_yaml_file(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise StackConfigError(
            f"{path}: the file holds {_kind(data)}; a stack file is a mapping with a 'config' key of key: value pairs"
        )
    raw = data.get("config") or {}
    if not isinstance(raw, dict):
        raise StackConfigError(f"{path}: config: must be a mapping of keys to values, not {_kind(raw)}")

    result = StackConfig(project=project.name, stack=stack)
    for key, value in raw.items():
        full_key = key if ":" in key else f"{project.name}:{key}"
        secret = _contains_secure(value)
        result.values[full_key] = _to_config_string(_replace_secure(value, full_key))
        if secret:
            result.secret_keys.append(full_key)
    # Project-level defaults (and values for other namespaces) apply where the stack is silent.
    for key, declaration in project.config_schema.items():
        full_key = key if ":" in key else f"{project.name}:{key}"
        if full_key in result.values or not isinstance(declaration, dict):
            continue
        for attribute in ("default", "value"):
            if attribute in declaration:
                result.values[full_key] = _to_config_string(declaration[attribute])
    return result


def _kind(value: Any) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number", bool: "true/false"}.get(
        type(value), type(value).__name__
    )


def _contains_secure(value: Any) -> bool:
    if isinstance(value, dict):
        if set(value) == {"secure"}:
            return True
        return any(_contains_secure(v) for v in value.values())
    if isinstance(value, list):
        return any(_contains_secure(v) for v in value)
    return False


def _replace_secure(value: Any, key: str) -> Any:
    if isinstance(value, dict):
        if set(value) == {"secure"}:
            return secret_placeholder(key)
        return {k: _replace_secure(v, key) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_secure(v, key) for v in value]
    return value


def _to_config_string(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, separators=(",", ":"))
