"""YAML text of JSON's values (dicts, lists, strings, numbers, booleans, null) as PyYAML's safe dumper writes it, with
libyaml's emitter and the nodes made directly.

PyYAML 6.0.3's SafeRepresenter finds each value's representer by a lookup along its type's MRO and keeps every
object it has seen for aliases; for JSON's types the node it makes is fixed (representer.py represent_str,
represent_dict through represent_mapping with no sorting, represent_list, represent_bool, represent_int,
represent_none), so `JsonDumper` makes those nodes itself: a fifth of the manifests' YAML time (preview/render.py),
and the endpoint pickers' configs are the largest strings the program writes. No anchors: every value written is a
tree of its own. Any other value (a float) is PyYAML's to represent.

`BlockYaml` writes the same text without building nodes: the preview's manifests, two thirds of its rendering time
under libyaml.

libyaml's emitter asks the resolver, twice for each scalar, whether the scalar would read back as its tag if left
plain (yaml/_yaml.pyx `CEmitter._serialize_node`); the answer is fixed by the scalar's text alone where no path
resolvers are set (resolver.py `BaseResolver.resolve`), and the manifests repeat a few thousand texts (their keys,
names, labels) millions of times, so short texts' answers are kept.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

_STR, _MAP, _SEQ, _INT, _BOOL, _NULL = (f"tag:yaml.org,2002:{kind}" for kind in ("str", "map", "seq", "int", "bool", "null"))


class JsonDumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """PyYAML's safe dumper (libyaml's emitter, where PyYAML was built with it as the pinned wheel is) for JSON's
    values."""

    # A string of several lines: None leaves its style to the emitter, as PyYAML's safe representer does; "|" writes
    # a literal block.
    multiline_style: str | None = None

    # Each short scalar text's implicit tag: the manifests' keys and names, read back for every scalar they write.
    # One table for the class and its subclasses, which share its resolvers (none of them adds one).
    _implicit_tags: dict[str, str] = {}

    def __init__(self, stream: Any, *args: Any, sort_keys: bool = True, default_flow_style: Any = False, **kwargs: Any):
        # The nodes are made in the mapping's order, in block style: a caller asking otherwise would not get it.
        if sort_keys or default_flow_style is not False:
            raise ValueError("JsonDumper writes mappings in order, in block style: sort_keys=False, default_flow_style=False")
        super().__init__(stream, *args, sort_keys=sort_keys, default_flow_style=default_flow_style, **kwargs)

    def ignore_aliases(self, data: Any) -> bool:
        return True

    def resolve(self, kind: type, value: Any, implicit: tuple[bool, bool]) -> str:
        """`BaseResolver.resolve`, a scalar's answer kept by its text (up to 64 characters, 200,000 texts) while no
        path resolvers are set."""
        if kind is not yaml.ScalarNode or self.yaml_path_resolvers:
            return super().resolve(kind, value, implicit)
        if not implicit[0]:
            return self.DEFAULT_SCALAR_TAG
        tag = self._implicit_tags.get(value)
        if tag is None:
            tag = super().resolve(kind, value, implicit)
            if len(value) <= 64 and len(self._implicit_tags) < 200_000:
                self._implicit_tags[value] = tag
        return tag

    def represent_data(self, data: Any) -> yaml.Node:
        kind = type(data)
        if kind is str:
            return yaml.ScalarNode(_STR, data, style=self.multiline_style if "\n" in data else None)
        if kind is dict:
            node = self.represent_data
            return yaml.MappingNode(_MAP, [(node(k), node(v)) for k, v in data.items()], flow_style=False)
        if kind is list:
            node = self.represent_data
            return yaml.SequenceNode(_SEQ, [node(item) for item in data], flow_style=False)
        if kind is bool:
            return yaml.ScalarNode(_BOOL, "true" if data else "false")
        if kind is int:
            return yaml.ScalarNode(_INT, str(data))
        if data is None:
            return yaml.ScalarNode(_NULL, "null")
        return super().represent_data(data)


# A text libyaml writes as it is, plain, in a block collection (emitter.c yaml_emitter_analyze_scalar with
# allow_unicode off, as PyYAML's dump sets it): printable ASCII, a letter first (no indicator, no leading space), not
# ending in a space; nor does it hold `: ` or ` #`, nor end in `:` (`_as_is`). It reads back as a string unless it is
# one of the words the safe resolver reads as a boolean or a null (resolver.py: the only implicit resolvers a letter
# starts).
_PLAIN = re.compile(r"[A-Za-z](?:[ -~]*[!-~])?")
_RESERVED = frozenset("yes Yes YES no No NO true True TRUE false False FALSE on On ON off Off OFF null Null NULL".split())


def _as_is(text: str) -> bool:
    """Whether libyaml writes `text` (a key of at most 128 characters, or a value) plain, as it is."""
    return bool(_PLAIN.fullmatch(text)) and ": " not in text and " #" not in text and text[-1] != ":" and text not in _RESERVED


# What a one-key document holding a scalar is written as, once the scalar's own text is cut out: `k: <text>`.
_KEY = "k"
# A width no scalar reaches: the text unfolded.
_UNFOLDED = 1 << 30


class _Unwritable(Exception):
    """A document `BlockYaml` leaves to libyaml whole: a value of another type, a key that is not a simple key."""


class BlockYaml:
    """`yaml.dump(document, Dumper=dumper, sort_keys=False, default_flow_style=False, width=width)`, byte for byte, for
    a mapping of JSON's values, written directly: libyaml's block layout (two spaces a level, a sequence in a mapping
    not indented, an empty map or list as `{}` and `[]`) is fixed, and only a scalar's own text asks the emitter
    anything. So each scalar's text is libyaml's own: a key's, and a value's wherever it cannot fold (a text with no
    space, or one that ends before the width), from a one-key document, kept by text; a value that may fold or spans
    lines (a literal block), from a document that places it as it stands (the same keys and sequences above it, so at
    the same indent and column), kept by text and place. A text libyaml writes plain as it is (`_as_is`) is its own,
    and a plain text that may fold is folded here as libyaml folds it (`_folded`). A float's text is libyaml's, kept
    by value. Anything else (a value of another type, a key libyaml does not write as a simple key, a literal block
    that leaves the document open, a document that is not a mapping) goes to libyaml whole. Each table is bounded.
    tests/test_yaml_text.py compares it with libyaml over random documents and at every depth and column."""

    def __init__(self, dumper: type[JsonDumper], width: int):
        self._dumper = dumper
        self._width = width
        self._texts: dict[Any, str | None] = {}  # a scalar -> its one-line text, None where it spans lines
        self._keys: dict[str, str] = {}
        self._lines: dict[str, str] = {}  # a text with no space -> what is written for it, line end included
        self._placed: dict[tuple[Any, ...], str] = {}
        self._before: dict[tuple[Any, ...], str] = {}
        self._folds: dict[tuple[str, int, int], str] = {}
        self._indents = [" " * n for n in range(0, 200, 2)]

    def dump(self, document: Any) -> str:
        if type(document) is not dict or not document:
            return self._libyaml(document)
        out: list[str] = []
        try:
            self._mapping(out, document, 0, False, None)
        except _Unwritable:
            return self._libyaml(document)
        return "".join(out)

    def _libyaml(self, document: Any, width: int | None = None) -> str:
        """libyaml's text of `document`, at this writer's width unless given another."""
        width = self._width if width is None else width
        return yaml.dump(document, Dumper=self._dumper, sort_keys=False, default_flow_style=False, width=width)

    def _spaces(self, indent: int) -> str:
        return self._indents[indent // 2] if indent < 200 else " " * indent

    def _mapping(self, out: list[str], mapping: dict[Any, Any], indent: int, inline: bool, path: Any) -> None:
        """A non-empty mapping at `indent`, its first key where the line already stands if `inline` (after `- `)."""
        spaces = self._spaces(indent)
        keys = self._keys
        for key, value in mapping.items():
            if inline:
                inline = False
            else:
                out.append(spaces)
            text = keys.get(key) or self._key(key)
            out.append(text)
            kind = type(value)
            if kind is dict or kind is list:
                if not value:
                    out.append(": {}\n" if kind is dict else ": []\n")
                elif kind is dict:
                    out.append(":\n")
                    self._mapping(out, value, indent + 2, False, (path, key))
                else:  # a sequence in a mapping stands at the mapping's indent
                    out.append(":\n")
                    self._sequence(out, value, indent, False, (path, key))
            else:
                out.append(": ")
                out.append(self._scalar(value, indent + len(text) + 2, indent + 2, (path, key)))

    def _sequence(self, out: list[str], sequence: list[Any], indent: int, inline: bool, path: Any) -> None:
        """A non-empty sequence whose dashes stand at `indent`, its first where the line already stands if `inline`."""
        spaces = self._spaces(indent)
        step = (path, None)
        for item in sequence:
            if inline:
                inline = False
            else:
                out.append(spaces)
            kind = type(item)
            if kind is dict or kind is list:
                if not item:
                    out.append("- {}\n" if kind is dict else "- []\n")
                else:
                    out.append("- ")
                    write = self._mapping if kind is dict else self._sequence
                    write(out, item, indent + 2, True, step)
            else:
                out.append("- ")
                out.append(self._scalar(item, indent + 2, indent + 2, step))

    def _scalar(self, value: Any, column: int, indent: int, path: Any) -> str:
        """A scalar's text and the line's end, written from `column`, a folded line going on at `indent` (where its
        place is `path`)."""
        if type(value) is not str:
            return self._scalar_text(value, column, indent, path)
        line = self._lines.get(value)
        if line is None:
            line = self._scalar_text(value, column, indent, path)
            # One line with no space: the same text wherever it stands.
            if " " not in value and "\n" not in value and len(self._lines) < 200_000:
                self._lines[value] = line
        return line

    def _scalar_text(self, value: Any, column: int, indent: int, path: Any) -> str:
        """What `_scalar` writes, found anew."""
        kind = type(value)
        if kind is str:
            if _as_is(value):
                # A text folds only at a space past the width (emitter.c write_plain and the quoted writers).
                if " " not in value or column + len(value) <= self._width:
                    return value + "\n"
                return self._folded(value, column, indent)
        elif kind is bool:
            return "true\n" if value else "false\n"
        elif kind is int:
            return int.__repr__(value) + "\n"
        elif value is None:
            return "null\n"
        elif kind is not float:
            raise _Unwritable
        if value in self._texts:
            text = self._texts[value]
        else:
            text = self._one_line(value)
            if len(self._texts) < 200_000:
                self._texts[value] = text
        if text is not None:
            if " " not in text or column + len(text) <= self._width:
                return text + "\n"
            if text == value:  # plain: folded here as libyaml folds it
                return self._folded(text, column, indent)
        return self._in_place(value, path)

    def _folded(self, text: str, column: int, indent: int) -> str:
        """A plain text that may fold, folded from `column` (kept by text and place)."""
        folded = self._folds.get((text, column, indent))
        if folded is None:
            folded = _folded(text, column, indent, self._width)
            if len(self._folds) < 50_000:
                self._folds[(text, column, indent)] = folded
        return folded

    def _one_line(self, value: Any) -> str | None:
        """The scalar's text as libyaml writes it as a mapping's value, unfolded (the width only folds: the style is
        chosen from the text alone, emitter.c analyze_scalar); None where it spans lines (a literal block)."""
        written = self._libyaml({_KEY: value}, _UNFOLDED)
        if not written.startswith(_KEY + ": ") or written.count("\n") != 1:
            return None
        return written[len(_KEY) + 2 : -1]

    def _key(self, key: Any) -> str:
        """A key's text (kept): as it is where libyaml writes it so, else libyaml's own; a key libyaml would not write
        as a simple key (a key of more than 128 characters, or of several lines: emitter.c check_simple_key) leaves
        the document to libyaml."""
        if type(key) is not str:
            raise _Unwritable
        if len(key) <= 128 and _as_is(key):
            text = key
        else:
            written = self._libyaml({key: 0})
            if not written.endswith(": 0\n") or written.count("\n") != 1 or written.startswith("? "):
                raise _Unwritable
            text = written[: -len(": 0\n")]
        if len(self._keys) < 200_000:
            self._keys[key] = text
        return text

    def _in_place(self, value: Any, path: Any) -> str:
        """The scalar's text and line ends as libyaml writes it in a document that places it where it stands: the
        same keys and sequences above it, each holding only the way down to it."""
        steps = []
        while path is not None:
            path, step = path
            steps.append(step)
        place = tuple(steps)
        text = self._placed.get((value, place))
        if text is None:
            # What stands before the scalar: the same document with a plain `x` in its place, less the `x`.
            before = self._before.get(place)
            if before is None:
                marker = self._libyaml(_placed(steps, "x"))
                if not marker.endswith("x\n"):
                    raise _Unwritable
                before = marker[:-2]
                if len(self._before) < 20_000:
                    self._before[place] = before
            written = self._libyaml(_placed(steps, value))
            # A literal block that keeps its last line breaks (`|+`) leaves the document open: libyaml then ends the
            # whole document with `...` (emitter.c open_ended), which only the whole document's writing knows of.
            if not written.startswith(before) or written.endswith("\n...\n"):
                raise _Unwritable
            text = written[len(before) :]
            if len(self._placed) < 20_000:
                self._placed[(value, place)] = text
        return text


def _placed(steps: list[Any], value: Any) -> Any:
    """`value` under the keys and sequences of `steps` (innermost first): a one-key mapping for a key, a one-item
    sequence for a sequence's item."""
    for step in steps:
        value = [value] if step is None else {step: value}
    return value


def _folded(text: str, column: int, indent: int, width: int) -> str:
    """A plain scalar's one-line text written from `column` as libyaml writes it (emitter.c yaml_emitter_write_plain):
    a space met past the width, neither following nor followed by another space, becomes a line break and the
    indent."""
    out = []
    start, last = 0, len(text) - 1
    position = text.find(" ")
    while position != -1:
        if column + position - start > width and text[position - 1] != " " and (position == last or text[position + 1] != " "):
            out.append(text[start:position])
            out.append("\n" + " " * indent)
            start, column = position + 1, indent
        position = text.find(" ", position + 1)
    out.append(text[start:])
    out.append("\n")
    return "".join(out)
