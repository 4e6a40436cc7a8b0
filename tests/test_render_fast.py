"""The rendering's own JSON encoder writes what `json.dumps(value, indent=2)` writes, byte for byte (resources.json's
bytes are held to tests/golden/ too), also item by item into a file, and hands json.dumps what it does not encode
itself."""

from __future__ import annotations

import json
import math

import pytest

from preview.render import dumps_indented, write_indented


@pytest.mark.parametrize(
    "value",
    [
        {},
        [],
        "",
        None,
        {"a": [], "b": {}, "c": [{}], "d": [[1, 2.5, -0.0, 1e300, 3.0], {"e": None, "f": True, "g": False}]},
        ['ünïcödé \u2028 \x00 "quoted" \\ / \t\n', {"κλειδί": "\U0001f600"}],
        [10**30, -7, 0.1 + 0.2, 5e-324],
        {"nested": {"deeper": {"deepest": [1, [2, [3, []]]]}}},
    ],
)
def test_it_writes_what_json_dumps_writes(value):
    assert dumps_indented(value) == json.dumps(value, indent=2)


@pytest.mark.parametrize("value", [{1: "x"}, {"a": math.nan}, [math.inf], {"t": (1, 2)}, [True, 1, {None: 2}]])
def test_what_it_does_not_encode_is_json_dumps_s(value):
    assert dumps_indented(value) == json.dumps(value, indent=2)


@pytest.mark.parametrize(
    "items", [[], [{}], [{"a": [1, {"b": "c"}]}, [], "x", None], [{"a": 1}, {"b": math.nan}], [{"a": 1}, {2: "x"}]]
)
def test_it_writes_a_list_item_by_item_as_json_dumps_does(tmp_path, items):
    path = tmp_path / "resources.json"
    path.write_text("left from an earlier run, longer than what follows " * 10)
    write_indented(path, items)
    assert path.read_text() == json.dumps(items, indent=2) + "\n"
