"""Config errors that name the full stack-config key and say what is allowed.

`ConfigError` derives from `pulumi.RunError`: the Pulumi CLI prints its message as an error and
exits non-zero without a traceback; the offline preview does the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import pulumi
from pydantic import BaseModel, ValidationError

from .models import PROJECT


@dataclass(frozen=True)
class ConfigIssue:
    # Path below the project namespace, e.g. ("models", 1, "release", "canaryWeight").
    path: tuple[str | int, ...]
    message: str
    # A key outside the project's namespace, named whole (`inference-platfrom:models`).
    foreign_key: str | None = None

    def key(self) -> str:
        return self.foreign_key or format_key(self.path)

    def __str__(self) -> str:
        return f"{self.key()}: {self.message}"


def format_key(path: Sequence[str | int]) -> str:
    """`("models", 1, "release")` -> `inference-platform:models[1].release`; a map key with a
    dot is bracketed: `tenants[0].quota.mig["1g.10gb"]`."""
    text = f"{PROJECT}:"
    for index, part in enumerate(path):
        if isinstance(part, int):
            text += f"[{part}]"
        elif "." in part:
            text += f'["{part}"]'
        else:
            text += part if index == 0 else f".{part}"
    return text


class ConfigError(pulumi.RunError):
    def __init__(self, issues: Iterable[ConfigIssue]):
        self.issues = list(issues)
        super().__init__(self._message())

    def _message(self) -> str:
        if len(self.issues) == 1:
            return f"invalid stack configuration: {self.issues[0]}"
        lines = [f"invalid stack configuration ({len(self.issues)} problems):"]
        lines.extend(f"  - {issue}" for issue in self.issues)
        return "\n".join(lines)


def issues_from_validation(error: ValidationError, root: type[BaseModel]) -> list[ConfigIssue]:
    """Turn pydantic's errors into one readable issue each, keyed by the camelCase path."""
    issues = []
    for detail in error.errors(include_url=False):
        path = tuple(part for part in detail["loc"] if not _is_union_tag(part))
        issues.append(ConfigIssue(path, _describe(detail, path, root)))
    return issues


def _is_union_tag(part: Any) -> bool:
    # pydantic adds the member type to the location of errors inside `X | None` unions.
    return isinstance(part, str) and ("[" in part or part in {"str", "int", "float", "bool"})


def _describe(detail: Mapping[str, Any], path: tuple[str | int, ...], root: type[BaseModel]) -> str:
    kind = detail["type"]
    value = detail.get("input")
    ctx = detail.get("ctx") or {}
    if kind == "extra_forbidden":
        allowed = _allowed_keys(root, path[:-1])
        return f"unknown key {path[-1]!r}; allowed keys here: {', '.join(allowed)}"
    if kind == "missing":
        return "required key is missing"
    if kind == "value_error":
        return str(ctx.get("error", detail["msg"]))
    if kind == "literal_error":
        return f"got {value!r}; allowed: {ctx.get('expected')}"
    if kind in {"greater_than", "greater_than_equal", "less_than", "less_than_equal"}:
        words = {
            "greater_than": "greater than",
            "greater_than_equal": "at least",
            "less_than": "less than",
            "less_than_equal": "at most",
        }
        bound = next(iter(ctx.values()))
        return f"must be {words[kind]} {bound} (got {value!r})"
    if kind in {"too_short", "too_long"}:
        return detail["msg"].replace("List", "list").replace("Value", "value") + f" (got {_short(value)})"
    if kind == "string_pattern_mismatch":
        return f"{value!r} does not match the allowed form {ctx.get('pattern')}"
    if kind.endswith("_type") or kind.endswith("_parsing"):
        expected = {
            "int": "a whole number",
            "float": "a number",
            "string": "a string",
            "bool": "true or false",
            "list": "a list",
            "dict": "a mapping of keys to values",
            "model": "a mapping of keys to values",
        }.get(kind.split("_")[0], kind)
        return f"expected {expected}, got {type(value).__name__} {_short(value)}"
    return f"{detail['msg']} (got {_short(value)})"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _allowed_keys(root: type[BaseModel], path: tuple[str | int, ...]) -> list[str]:
    """The camelCase keys the model at `path` accepts."""
    model: Any = root
    parts = list(path)
    while parts:
        part = parts.pop(0)
        if isinstance(part, int):
            continue
        field = next((f for f in model.model_fields.values() if f.alias == part), None)
        if field is None:
            return []
        if _is_mapping(field.annotation) and parts:
            parts.pop(0)  # the map's own key (a tier, a profile name), not a field
        model = _model_in(field.annotation)
        if model is None:
            return []
    return sorted(f.alias or name for name, f in model.model_fields.items())


def _is_mapping(annotation: Any) -> bool:
    if getattr(annotation, "__origin__", None) is dict:
        return True
    return any(_is_mapping(arg) for arg in getattr(annotation, "__args__", ()) or ())


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The BaseModel class inside Optional/list/dict/Annotated wrappers, if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_in(arg)
        if found is not None:
            return found
    origin = getattr(annotation, "__origin__", None)
    if origin is not None and hasattr(annotation, "__metadata__"):
        return _model_in(origin)
    return None
