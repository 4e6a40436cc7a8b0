"""Read Pulumi.yaml and stacks/Pulumi.<stack>.yaml the way the Pulumi CLI hands config to a program.

The CLI gives a Python program every config value as a string keyed `namespace:key`, objects and
lists JSON-encoded, and a list of the keys that hold secrets. Secure values cannot be decrypted
here (no passphrase, no KMS), so they become placeholders that stay marked secret.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class _StackFileLoader(yaml.SafeLoader):
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


def load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_StackFileLoader)  # noqa: S506 - a SafeLoader subclass


class StackConfigError(Exception):
    """The project or stack file itself cannot be read (not a config-value problem)."""


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
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise StackConfigError(f"cannot read {path}: {error}") from None
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
    try:
        data = load_yaml(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise StackConfigError(f"{path} is not valid YAML: {error}") from None
    raw = data.get("config") or {}
    if not isinstance(raw, dict):
        raise StackConfigError(f"{path}: 'config' must be a mapping of keys to values")

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
