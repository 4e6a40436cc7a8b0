"""The serving aliases (`registry.servingAliases`): what the config refuses (an alias a source reads, one
alias on two versions, `latest`), and the outputs the alias tool refuses before any request."""

from __future__ import annotations

import json
from typing import Any

import pytest

from platform_config.loader import parse_platform_config
from platform_config.models import ServingAliases

from .helpers import config_problems, write_stack
from .registry_helpers import SERVING_ALIASES, tool, with_registry


def test_a_serving_alias_a_source_reads_is_refused():
    raw = with_registry("staging", "https://mlflow.example.com", {(0, 1): {"model": "served", "alias": "staging-canary"}})
    raw["registry"]["servingAliases"] = SERVING_ALIASES
    problems = config_problems(raw)
    assert any(
        p.startswith(
            "inference-platform:models[0].versions[1].source.mlflow.alias: 'staging-canary' is "
            "registry.servingAliases.canary (summarizer): the deploy moves that alias"
        )
        for p in problems
    ), problems
    raw["registry"]["servingAliases"] = {"stable": "prod", "canary": "prod"}
    assert any("registry.servingAliases" in p and "stable and canary are both 'prod'" in p for p in config_problems(raw))


def test_one_alias_wanted_on_two_versions_is_refused_and_outputs_of_another_registry_exit_2(tmp_path):
    from platform_tools.aliases import AliasInputError, wanted_aliases

    sources = {(0, 0): {"model": "served", "version": 1}, (1, 0): {"model": "served", "version": 2}}
    raw = with_registry("staging", "https://mlflow.example.com", sources, servingAliases=SERVING_ALIASES)
    # The stack is refused before any deploy: two models on one registered model could want one alias on two versions.
    assert (
        "inference-platform:models[1].versions[0].source.mlflow.model: registered model 'served' is summarizer's too "
        "(inference-platform:models[0].versions[0].source.mlflow): with registry.servingAliases each model and adapter "
        "takes its versions from a registered model of its own"
    ) in config_problems(raw)
    # The tool holds to it too, whatever the outputs it is given.
    del raw["registry"]["servingAliases"]
    plain = parse_platform_config(raw)
    aliases = ServingAliases(stable="staging", canary="staging-canary")
    config = plain.model_copy(update={"registry": plain.registry.model_copy(update={"serving_aliases": aliases})})
    raw["registry"]["servingAliases"] = SERVING_ALIASES
    entry = {"source": "registry", "registeredModel": "served"}
    outputs: dict[str, Any] = {
        "canaryReleases": {
            "summarizer": {"stable": "v1", "canary": "v2", "canaryWeight": 0, "adapters": {}},
            "labeller": {"stable": "v1", "canary": None, "canaryWeight": 0, "adapters": {}},
            "assistant": {"stable": "v1", "canary": None, "canaryWeight": 0, "adapters": {}},
            "code-helper": {"stable": "v1", "canary": None, "canaryWeight": 0, "adapters": {}},
            "rag-answerer": {"stable": "v1", "canary": None, "canaryWeight": 0, "adapters": {}},
            "embedder": {"stable": "v1", "canary": None, "canaryWeight": 0, "adapters": {}},
        },
        "modelRegistry": {
            "trackingUri": "https://mlflow.example.com",
            "models": {
                "summarizer": {"v1": {**entry, "registryVersion": "1"}},
                "labeller": {"v1": {**entry, "registryVersion": "2"}},
            },
        },
    }
    with pytest.raises(AliasInputError, match="alias 'staging' would name version 1 .summarizer/v1, stable. and version 2"):
        wanted_aliases(outputs, config)

    # Outputs resolved at another registry than the stack's: exit 2 before any request.
    raw = with_registry("staging", "https://mlflow.example.com", {(0, 0): sources[(0, 0)]}, servingAliases=SERVING_ALIASES)
    stack = write_stack(tmp_path, raw)
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps({**outputs, "modelRegistry": {**outputs["modelRegistry"], "trackingUri": "https://other"}}))
    done = tool("aliases", "test", "--stack-file", str(stack), "--deployed", str(path))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "resolved at 'https://other', but registry.trackingUri is 'https://mlflow.example.com'" in done.stderr


def test_a_serving_alias_may_not_be_latest_in_any_case_and_outputs_that_are_not_the_stack_files_are_refused(tmp_path):
    from platform_tools.aliases import AliasInputError, wanted_aliases

    raw = with_registry("staging", "https://mlflow.example.com", {}, servingAliases={"stable": "Latest", "canary": "c"})
    assert any("registry.servingAliases.stable: 'Latest' is not an MLflow alias" in p for p in config_problems(raw))

    sources = {(0, 0): {"model": "served", "version": 1}}
    raw = with_registry("staging", "https://mlflow.example.com", sources, servingAliases=SERVING_ALIASES)
    config = parse_platform_config(raw)
    releases: dict[str, Any] = {
        m["name"]: {"stable": "v1", "canary": None, "canaryWeight": 0, "adapters": {}} for m in raw["models"]
    }
    registry = {"trackingUri": "https://mlflow.example.com", "models": {}}
    # summarizer/v1 is the registry's in the stack file: outputs without its entry were not this stack file deployed.
    with pytest.raises(AliasInputError, match="modelRegistry.models.summarizer.v1 is not the registry version"):
        wanted_aliases({"canaryReleases": releases, "modelRegistry": registry}, config)
    # A release naming a version the stack file does not declare, or a weight that is no number, neither.
    entry = {"source": "registry", "registeredModel": "served", "registryVersion": "1"}
    registry["models"] = {"summarizer": {"v1": entry}}
    for bad in ({"stable": "v9"}, {"canaryWeight": True}):
        broken = {**releases, "summarizer": {**releases["summarizer"], **bad}}
        with pytest.raises(AliasInputError, match="canaryReleases.summarizer is not a release of the stack file's versions"):
            wanted_aliases({"canaryReleases": broken, "modelRegistry": registry}, config)

    # What the stack took versions from before and no longer does loses both aliases.
    previous = {"modelRegistry": {"models": {"summarizer": {"v1": {**entry, "registeredModel": "old-summarizer"}}}}}
    wanted = wanted_aliases({"canaryReleases": releases, "modelRegistry": registry}, config, previous)
    assert [(w.registered_model, w.alias, w.version) for w in wanted] == [
        ("old-summarizer", "staging", None),
        ("old-summarizer", "staging-canary", None),
        ("served", "staging", "1"),
        ("served", "staging-canary", None),
    ]
