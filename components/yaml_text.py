"""YAML text of JSON's values (dicts, lists, strings, numbers, booleans, null) as PyYAML's safe dumper writes it, with
libyaml's emitter and the nodes made directly.

PyYAML 6.0.3's SafeRepresenter finds each value's representer by a lookup along its type's MRO and keeps every
object it has seen for aliases; for JSON's types the node it makes is fixed (representer.py represent_str,
represent_dict through represent_mapping with no sorting, represent_list, represent_bool, represent_int,
represent_none), so `JsonDumper` makes those nodes itself: a fifth of the manifests' YAML time (preview/render.py),
and the endpoint pickers' configs are the largest strings the program writes. No anchors: every value written is a
tree of its own. Any other value (a float) is PyYAML's to represent.

libyaml's emitter asks the resolver, twice for each scalar, whether the scalar would read back as its tag if left
plain (yaml/_yaml.pyx `CEmitter._serialize_node`); the answer is fixed by the scalar's text alone where no path
resolvers are set (resolver.py `BaseResolver.resolve`), and the manifests repeat a few thousand texts (their keys,
names, labels) millions of times, so short texts' answers are kept.
"""

from __future__ import annotations

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
