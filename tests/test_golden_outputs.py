"""Every stack's preview output, held against the copy recorded in tests/golden/.

A restructure must leave what the program declares byte for byte as it was; a change that means
to alter it records the new output with `make golden`, and the diff of tests/golden/ shows a
reviewer exactly what changes on the cluster."""

from __future__ import annotations

import difflib

import pytest

from .helpers import ROOT, STACKS

pytestmark = pytest.mark.slow

GOLDEN = ROOT / "tests" / "golden"


@pytest.mark.parametrize("stack", STACKS)
def test_resources_are_as_recorded(previews, stack):
    recorded = (GOLDEN / f"{stack}.resources.json").read_text()
    produced = (previews[stack].out / "resources.json").read_text()
    if produced != recorded:
        diff = difflib.unified_diff(recorded.splitlines(), produced.splitlines(), "recorded", "produced", lineterm="", n=2)
        pytest.fail(
            f"{stack}: resources.json differs from tests/golden (run `make golden` if meant):\n" + "\n".join(list(diff)[:80])
        )
