"""Write a canary step into a stack file as a minimal text edit: only the model's release keys
change, every other byte (comments, order, quoting, blank lines) stays as it was.

The release block is found by composing the YAML (PyYAML's nodes carry the character offsets of
each key and value); the edit replaces the weight scalars (`canaryWeight`, or both entries of
`weights`), or on promotion at 100 the `stable` scalar, and deletes whole entries (`canary`,
`canaryWeight`, `weights`, `stepOverride`, `hold`). `stepOverride` covers one change only, so
every write removes it; `hold` is written by a hold and removed by every other step. A
flow-style release (`release: {stable: v1, ...}`) is rewritten entry by entry from its own
text. The result is parsed again and must equal the old file with exactly the intended change
applied, or nothing is written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import yaml

from preview.stack_config import StackConfigError, load_yaml


class StackEditError(Exception):
    """The step cannot be written as a minimal edit: said why, nothing written."""


@dataclass(frozen=True)
class Change:
    """The new state of one model's release: a canary weight, or the canary made stable."""

    model: str
    stable: str
    canary: str
    # None: the canary becomes the stable version.
    new_weight: int | None
    # Why a person holds the canary at `new_weight` (release.hold); None: no hold after the change.
    hold: str | None = None


Edit = tuple[int, int, str]


def _get(node: yaml.Node | None, key: str) -> tuple[yaml.ScalarNode, yaml.Node] | None:
    if not isinstance(node, yaml.MappingNode):
        return None
    for key_node, value_node in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
            return key_node, value_node
    return None


def _models_key(config: dict[str, Any], project: str) -> str:
    for key in (f"{project}:models", "models"):
        if key in config:
            return key
    raise StackEditError(f"the stack file has no {project}:models key")


def _release(root: yaml.Node, project: str, model: str) -> yaml.MappingNode:
    config = _get(root, "config")
    models = (_get(config[1], f"{project}:models") or _get(config[1], "models")) if config else None
    if models is None or not isinstance(models[1], yaml.SequenceNode):
        raise StackEditError(f"the stack file has no {project}:models list")
    for item in models[1].value:
        name = _get(item, "name")
        if name is not None and isinstance(name[1], yaml.ScalarNode) and name[1].value == model:
            release = _get(item, "release")
            if release is None or not isinstance(release[1], yaml.MappingNode):
                raise StackEditError(f"model {model!r} has no release mapping written out in the file (merged from an anchor?)")
            return release[1]
    raise StackEditError(f"no model {model!r} in {project}:models")


def _last_end(node: yaml.Node) -> int:
    """Where a value's text ends: a block collection's own end mark lies at the next token."""
    if isinstance(node, yaml.MappingNode) and node.value and not node.flow_style:
        return _last_end(node.value[-1][1])
    if isinstance(node, yaml.SequenceNode) and node.value and not node.flow_style:
        return _last_end(node.value[-1])
    return node.end_mark.index


def _delete_block_entry(text: str, key: yaml.Node, value: yaml.Node) -> Edit:
    start = text.rfind("\n", 0, key.start_mark.index) + 1
    if text[start : key.start_mark.index].strip():
        raise StackEditError(f"line {key.start_mark.line + 1}: {key.value!r} does not start its line; edit the file by hand")
    last = _last_end(value)
    if last > 0 and text[last - 1] == "\n":
        end = last  # a block scalar (`reason: >` ...) ends at the start of the line after it
    else:
        end = text.find("\n", last)
        end = len(text) if end < 0 else end + 1
    rest = text[last:end].strip()
    if rest and not rest.startswith("#"):
        raise StackEditError(f"line {key.start_mark.line + 1}: more follows {key.value!r} on its line; edit the file by hand")
    return start, end, ""


def _apply(text: str, edits: list[Edit]) -> str:
    ordered = sorted(edits, key=lambda e: (e[0], e[1]))
    for (_, end, _), (start, _, _) in zip(ordered, ordered[1:]):
        if start < end:
            raise StackEditError("overlapping edits of the release block; edit the file by hand")
    for start, end, replacement in reversed(ordered):
        text = text[:start] + replacement + text[end:]
    return text


def _scalar(node: yaml.Node, what: str) -> yaml.ScalarNode:
    if not isinstance(node, yaml.ScalarNode):
        raise StackEditError(f"line {node.start_mark.line + 1}: {what} is not a plain value")
    return node


def _yaml_string(value: str) -> str:
    """`value` as YAML reads it back as that string: plain when it can be (v2), quoted when YAML
    would read another type or value (`on`, `no`, `null`, `1e3`)."""
    return value if yaml.safe_load(value) == value else json.dumps(value)


def apply_change(text: str, project: str, change: Change) -> str:
    """The stack file's text with the change written; raises StackEditError if that cannot be
    done as a minimal edit that changes nothing else."""
    try:
        before = load_yaml(text)  # first: it bounds the file's size, depth and aliases
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except (yaml.YAMLError, StackConfigError) as error:
        raise StackEditError(f"cannot read the stack file: {error}") from None
    if root is None:
        raise StackEditError("the stack file is empty")
    release = _release(root, project, change.model)
    entries = {key.value: (key, value) for key, value in release.value if isinstance(key, yaml.ScalarNode)}
    for name in ("stable", "canary"):
        if name not in entries:
            raise StackEditError(f"the release of {change.model!r} has no {name!r} entry written out in the file")
    replace: list[Edit] = []
    delete = ["stepOverride"]
    inserts: list[str] = []
    if change.hold is None:
        delete.append("hold")
    elif "hold" in entries:
        node = _scalar(entries["hold"][1], "hold")
        replace.append((node.start_mark.index, node.end_mark.index, json.dumps(change.hold)))
    else:
        inserts.append(f"hold: {json.dumps(change.hold)}")
    if change.new_weight is None:
        stable = _scalar(entries["stable"][1], "stable")
        replace.append((stable.start_mark.index, stable.end_mark.index, _yaml_string(change.canary)))
        delete += ["canary", "canaryWeight", "weights"]
    elif "weights" in entries:
        weights = entries["weights"][1]
        for version, weight in ((change.stable, 100 - change.new_weight), (change.canary, change.new_weight)):
            entry = _get(weights, version)
            if entry is None:
                raise StackEditError(f"release.weights of {change.model!r} has no entry {version!r}")
            node = _scalar(entry[1], f"weights.{version}")
            replace.append((node.start_mark.index, node.end_mark.index, str(weight)))
    elif "canaryWeight" in entries:
        node = _scalar(entries["canaryWeight"][1], "canaryWeight")
        replace.append((node.start_mark.index, node.end_mark.index, str(change.new_weight)))
    else:
        inserts.insert(0, f"canaryWeight: {change.new_weight}")
    removed = [name for name in delete if name in entries]

    if release.flow_style:
        if "#" in text[release.start_mark.index : release.end_mark.index]:
            raise StackEditError(
                f"line {release.start_mark.line + 1}: the flow-style release of {change.model!r} holds comments, which "
                "rewriting it would drop; edit the file by hand"
            )
        kept = []
        for key, value in release.value:
            if key.value in removed:
                continue
            start, end = key.start_mark.index, _last_end(value)
            inner = [(s - start, e - start, r) for s, e, r in replace if start <= s and e <= end]
            kept.append(_apply(text[start:end], inner))
        kept += inserts
        new_text = _apply(text, [(release.start_mark.index, release.end_mark.index, "{" + ", ".join(kept) + "}")])
    else:
        edits = replace + [_delete_block_entry(text, *entries[name]) for name in removed]
        if inserts:
            key, value = entries["canary"]
            at = text.find("\n", _last_end(value))
            newline = "\r\n" if "\r\n" in text else "\n"  # the file's own line ends
            prefix = newline if at < 0 else ""
            at = len(text) if at < 0 else at + 1
            lines = "".join(f"{' ' * key.start_mark.column}{insert}{newline}" for insert in inserts)
            edits.append((at, at, prefix + lines))
        new_text = _apply(text, edits)

    _check(before, new_text, project, change)
    return new_text


def _check(before: Any, new_text: str, project: str, change: Change) -> None:
    """The new text parses to the old data with exactly the intended change."""
    try:
        after = load_yaml(new_text)
    except StackConfigError as error:
        raise StackEditError(f"the edit would leave the file unreadable ({error}); nothing written") from None
    # A JSON copy: a value shared through an anchor becomes two values, as the program reads it.
    expected = json.loads(json.dumps(before))
    models = expected["config"][_models_key(expected["config"], project)]
    release = next(m for m in models if isinstance(m, dict) and m.get("name") == change.model)["release"]
    release.pop("stepOverride", None)
    release.pop("hold", None)
    if change.hold is not None:
        release["hold"] = change.hold
    if change.new_weight is None:
        release["stable"] = change.canary
        for key in ("canary", "canaryWeight", "weights"):
            release.pop(key, None)
    elif "weights" in release:
        release["weights"] = {**release["weights"], change.stable: 100 - change.new_weight, change.canary: change.new_weight}
    else:
        release["canaryWeight"] = change.new_weight
    if after != expected:
        raise StackEditError(
            f"the edit would change more than the release of {change.model!r} (is it shared through an anchor?); "
            "nothing written: edit the file by hand"
        )
