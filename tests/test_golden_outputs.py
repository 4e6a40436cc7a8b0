"""Every stack's preview output (its resources and its stack outputs), held against the copy recorded in tests/golden/.

A restructure must leave what the program declares byte for byte as it was; a change that means
to alter it records the new output with `make golden`, and the diff of tests/golden/ shows a
reviewer exactly what changes on the cluster."""

from __future__ import annotations

import difflib
import json
from pathlib import Path

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


def stack_outputs(report_file: Path) -> str:
    """A preview's stack outputs as recorded: the report's `stackOutputs`, keys sorted."""
    return json.dumps(json.loads(report_file.read_text())["stackOutputs"], indent=2, sort_keys=True) + "\n"


@pytest.mark.parametrize("stack", STACKS)
def test_stack_outputs_are_as_recorded(previews, stack):
    # What other stacks and operators read (node pools, server peaks, GPU capacity) is part of
    # what the program declares.
    recorded = (GOLDEN / f"{stack}.outputs.json").read_text()
    produced = stack_outputs(previews[stack].out / "report.json")
    if produced != recorded:
        diff = difflib.unified_diff(recorded.splitlines(), produced.splitlines(), "recorded", "produced", lineterm="", n=2)
        pytest.fail(
            f"{stack}: stack outputs differ from tests/golden (run `make golden` if meant):\n" + "\n".join(list(diff)[:80])
        )
