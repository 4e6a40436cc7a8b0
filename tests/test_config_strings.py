"""Every string of the stack config has an allow-list where it is read: a pattern (or a literal's choices) that
admits ASCII only and is bounded in length, so that nothing a shell script, an IAM policy, an HTTP header, the
gateway's Lua filter, PromQL, a label or an annotation reads specially can come from config unchecked (issue 27).

The models are walked field by field (pydantic's own field types, the nested models, lists and mapping keys), and
each allow-list's pattern is proved ASCII and bounded from its parsed form (Python's `re` parser), not sampled; the
few strings of free text are listed with why they need no pattern."""

from __future__ import annotations

import re
import types
from re import _constants as sre_constants  # type: ignore[attr-defined]
from re import _parser as sre_parser  # type: ignore[attr-defined]
from typing import Annotated, Any, Iterator, Literal, Union, get_args, get_origin

import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from platform_config.models import AllowList, PlatformConfig

# Strings with no pattern, by the path the walk names them, and why none is needed: each is free text a person
# writes for people, and reaches no shell script, IAM policy, header, Lua filter, PromQL, label or annotation.
FREE_TEXT: dict[str, str] = {
    "models[].release.hold": "why a person holds a canary: read by the canary tool (platform_tools) and shown in its "
    "output only; bounded to 10-500 characters (HOLD_REASON_LENGTH)",
}

# Leaves the walk must find, so that a walk that finds nothing cannot pass.
KNOWN_LEAVES = (
    "models[].versions[].source.huggingface",
    "models[].versions[].source.revision",
    "models[].adapters[].versions[].source.revision",
    "batchJobs[].input.revision",
    "tenants[].groups[]",
    "nodePools[].labels{key}",
    "traffic.authentication.audiences[]",
)


def string_leaves(model: type[BaseModel]) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """(path, the metadata that constrains it) of every string a model reads, keys of mappings included."""
    yield from _leaves(model, (), "", set())


def _leaves(annotation: Any, metadata: tuple[Any, ...], path: str, seen: set[type]) -> Iterator[tuple[str, tuple[Any, ...]]]:
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is Annotated:
        yield from _leaves(args[0], (*metadata, *args[1:]), path, seen)
    elif origin in (Union, types.UnionType):
        for arg in args:
            if arg is not type(None):
                yield from _leaves(arg, metadata, path, seen)
    elif origin is Literal:
        return
    elif origin in (list, tuple, set, frozenset):
        for arg in args:
            if arg is not Ellipsis:
                yield from _leaves(arg, (), f"{path}[]", seen)
    elif origin is dict:
        yield from _leaves(args[0], (), f"{path}{{key}}", seen)
        yield from _leaves(args[1], (), f"{path}{{}}", seen)
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation in seen:
            return
        for name, field in annotation.model_fields.items():
            key = f"{path}.{field.alias or name}" if path else (field.alias or name)
            yield from _leaves(field.annotation, tuple(field.metadata), key, seen | {annotation})
    elif annotation is str:
        yield path, metadata


def allow_lists(metadata: tuple[Any, ...]) -> list[tuple[str, int, int | None]]:
    """(pattern, flags, max length) of each allow-list in a leaf's metadata: an AllowList validator, or pydantic's
    `Field(pattern=..., max_length=...)`."""
    found: list[tuple[str, int, int | None]] = []
    max_length = None
    for item in metadata:
        if isinstance(item, FieldInfo):
            found += allow_lists(tuple(item.metadata))
        elif isinstance(item, AllowList):
            found.append((item.pattern.pattern, item.pattern.flags, item.max_length))
        elif getattr(item, "pattern", None) is not None:
            found.append((str(item.pattern), 0, None))
        if getattr(item, "max_length", None) is not None and not isinstance(item, AllowList):
            max_length = item.max_length
    return [(pattern, flags, limit if limit is not None else max_length) for pattern, flags, limit in found]


def non_ascii_parts(pattern: str, flags: int = 0) -> list[str]:
    """What in a pattern can match a character outside ASCII, from its parsed form: `\\w`, `\\d` or `\\s` without
    re.ASCII, any negated class or `.`, a literal or a range above 127, case folding without re.ASCII (`(?i)k` matches
    the Kelvin sign). Lookaheads are left out: they match nothing themselves."""
    parsed = sre_parser.parse(pattern, flags)
    return _non_ascii(list(parsed), parsed.state.flags)


def _non_ascii(items: list[Any], flags: int) -> list[str]:
    ascii_only = bool(flags & re.ASCII)
    found = []
    if flags & re.IGNORECASE and not ascii_only:
        found.append("case folding without re.ASCII")
    for op, value in items:
        name = str(op)
        if name in ("NOT_LITERAL", "ANY"):
            found.append(name)
        elif name == "LITERAL" and value > 127:
            found.append(f"literal {chr(value)!r}")
        elif name == "IN":
            found += _non_ascii_class(value, ascii_only)
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            found += _non_ascii(list(value[2]), flags)
        elif name == "SUBPATTERN":
            _, add, remove, inner = value
            found += _non_ascii(list(inner), (flags | add) & ~remove)
        elif name == "BRANCH":
            for branch in value[1]:
                found += _non_ascii(list(branch), flags)
        elif name == "ATOMIC_GROUP":
            found += _non_ascii(list(value), flags)
    return found


def _non_ascii_class(items: list[Any], ascii_only: bool) -> list[str]:
    found = []
    for op, value in items:
        name = str(op)
        if name == "NEGATE":
            found.append("a negated class")
        elif name == "LITERAL" and value > 127:
            found.append(f"literal {chr(value)!r}")
        elif name == "RANGE" and value[1] > 127:
            found.append(f"range up to {chr(value[1])!r}")
        elif name == "CATEGORY" and (not ascii_only or str(value).startswith("CATEGORY_NOT_")):
            found.append(str(value))
    return found


def bounded(pattern: str, flags: int, max_length: int | None) -> bool:
    return max_length is not None or sre_parser.parse(pattern, flags).getwidth()[1] < sre_constants.MAXREPEAT


LEAVES = dict(string_leaves(PlatformConfig))


def test_the_walk_reads_every_block():
    assert set(KNOWN_LEAVES) <= set(LEAVES), sorted(set(KNOWN_LEAVES) - set(LEAVES))
    assert len(LEAVES) > 60


@pytest.mark.parametrize("path", sorted(LEAVES))
def test_every_config_string_has_an_ascii_bounded_allow_list(path: str):
    found = allow_lists(LEAVES[path])
    if path in FREE_TEXT:
        assert not found, f"{path} has an allow-list now: take it off FREE_TEXT"
        return
    assert found, f"{path}: no pattern, no choices, and no reason in FREE_TEXT"
    for pattern, flags, _ in found:
        assert not non_ascii_parts(pattern, flags), f"{path}: {pattern!r} admits {non_ascii_parts(pattern, flags)}"
    assert any(bounded(*allow_list) for allow_list in found), f"{path}: no bound on its length ({found})"


def test_free_text_is_bounded_where_it_is_read():
    """The free text there is still has a length bound (`Field(max_length=...)`)."""
    for path in FREE_TEXT:
        metadata = [inner for item in LEAVES[path] for inner in (item.metadata if isinstance(item, FieldInfo) else [item])]
        assert any(getattr(item, "max_length", None) for item in metadata), path


@pytest.mark.parametrize(
    "pattern, admits",
    [
        (r"[A-Za-z0-9][\w.-]*/[\w.-]+", "CATEGORY_WORD"),
        (r"[^\s/?#@]+", "a negated class"),
        (r"https?://.+", "ANY"),
        (r"[!-\u00ff]", "range up to"),
        (r"(?i)[a-z]+", "case folding"),
        (r"caf\u00e9", "literal"),
    ],
)
def test_the_proof_sees_what_admits_non_ascii(pattern: str, admits: str):
    assert any(admits in part for part in non_ascii_parts(pattern))
    assert re.fullmatch(r"[A-Za-z0-9._-]{1,63}", "qwen") and not non_ascii_parts(r"[A-Za-z0-9._-]{1,63}")
    assert not non_ascii_parts(r"\w+", re.ASCII)


def test_the_proof_sees_an_unbounded_pattern():
    assert not bounded(r"[a-z]+", 0, None)
    assert not bounded(r"s3://[a-z]{3}(/[a-z]*)?", 0, None)
    assert bounded(r"[a-z]+", 0, 63)
    assert bounded(r"[a-z]{1,63}(/[a-z0-9]{0,1024})?", 0, None)


def test_the_gateway_filters_lua_holds_printable_ascii_strings_only():
    """Where config strings are interpolated into the gateway filter's Lua they are quoted (JSON's quoting, which Lua
    reads alike for printable ASCII), and a string outside that is refused rather than written as an escape Lua 5.1
    does not read."""
    from components.specs.gateway import _lua_literal

    assert _lua_literal({'x"y': ["a\\b", 1, True]}) == '{["x\\"y"] = {"a\\\\b", 1, true}}'
    for hostile in ("caf\u00e9", "line\nbreak", "nul\x00"):
        with pytest.raises(ValueError, match="not printable ASCII"):
            _lua_literal({"claim": hostile})


def test_promql_holds_config_values_as_quoted_strings_and_plain_names():
    """Where tenant, model, pool and job names reach the recording rules, alerts and dashboards they are PromQL string
    literals (so no value can end the matcher), and inside a regular expression only plain names."""
    from components.specs.metrics import promql_names, promql_string

    assert promql_string('team-a"} or vector(1) #') == '"team-a\\"} or vector(1) #"'
    assert promql_names(["team-a", "team_b"]) == '"team-a|team_b"'
    for hostile in ("caf\u00e9", "line\nbreak"):
        with pytest.raises(ValueError, match="not printable ASCII"):
            promql_string(hostile)
    for hostile in ("llama.8b", "a|b", ".*"):
        with pytest.raises(ValueError, match="not a plain name"):
            promql_names(["team-a", hostile])
