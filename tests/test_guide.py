"""The README's walkthroughs hold: every snippet marked `<!-- snippet: <stack> -->` is merged into that stack's
config as the guide says (a list item with the `name` of an existing one changes it key by key, a new name is
added, a mapping merges, a value replaces) and the result passes every config check and resolves into a plan."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
import yaml

from .helpers import ROOT, raw_stack, validate

GUIDE = ROOT / "README.md"
SNIPPET = re.compile(r"<!-- snippet: (?P<stack>[a-z]+) -->\n```yaml\n(?P<body>.*?)\n```", re.DOTALL)


def merged(base: Any, change: Any) -> Any:
    if isinstance(base, dict) and isinstance(change, dict):
        out = dict(base)
        for key, value in change.items():
            out[key] = merged(base[key], value) if key in base else value
        return out
    if isinstance(base, list) and isinstance(change, list) and all(isinstance(i, dict) and "name" in i for i in change):
        out_list = list(base)
        for item in change:
            at = next((i for i, old in enumerate(out_list) if isinstance(old, dict) and old.get("name") == item["name"]), None)
            if at is None:
                out_list.append(item)
            else:
                out_list[at] = merged(out_list[at], item)
        return out_list
    return change


def snippets() -> list[tuple[str, dict[str, Any]]]:
    return [(m["stack"], yaml.safe_load(m["body"])) for m in SNIPPET.finditer(GUIDE.read_text())]


def test_the_guide_has_its_walkthroughs():
    assert [stack for stack, _ in snippets()] == ["staging", "staging", "prod", "prod"]
    for heading in ("Add a model", "Add a tenant", "Run a canary", "Pause a batch job", "Bump a pin"):
        assert f"\n## {heading}\n" in GUIDE.read_text(), heading


@pytest.mark.parametrize("index", range(4), ids=["add-a-model", "add-a-tenant", "run-a-canary", "pause-a-batch-job"])
def test_each_snippet_passes_every_check_on_its_stack(index):
    stack, change = snippets()[index]
    base = raw_stack(stack)
    plan = validate(merged(copy.deepcopy(base), change))
    names = {m.model.name for m in plan.models}
    for model in change.get("models", []):
        assert model["name"] in names
    # Every line beside the models and tenants it adds is one the change needs: without the snippet's quota and
    # capacity lines, the model or tenant alone does not fit (the guide shows why).
    bare = {k: v for k, v in change.items() if k in (("models", "tenants") if index == 1 else ("models",))}
    if index < 3 and bare != change:
        from platform_config.errors import ConfigError

        with pytest.raises(ConfigError):
            validate(merged(copy.deepcopy(base), bare))


def test_a_paused_job_holds_nothing():
    stack, change = snippets()[3]
    plan = validate(merged(copy.deepcopy(raw_stack(stack)), change))
    (job,) = [j for j in plan.batch_jobs if j.job.name == "ticket-labels"]
    assert job.job.paused


def test_the_canary_snippet_starts_a_canary_at_its_first_step():
    _, change = snippets()[2]
    plan = validate(merged(copy.deepcopy(raw_stack("prod")), change))
    release = plan.model("llama-1b").model.release
    assert (release.stable, release.canary, release.canary_weight) == ("v1", "v2", release.steps[0])
