"""The gateway in a real Envoy beyond prod's own (tests/test_gateway_in_envoy.py): the pinned Envoy, staging's
Knative model without a picker through the local gateway, a server's 503 and the gateway's own overflow
answer, the rendered filter on the serving listener only, prod without override principals, and every
model of dev and staging through its gateway."""

from __future__ import annotations

import json
import re
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from components.specs import gateway as gateway_spec
from platform_config.pins import ENVOY, ISTIO_PROXY_ENVOY_VERSION

from . import real_envoy
from .envoy_upstreams import Answer
from .gateway_envoy_helpers import (
    CANARY_ANALYSIS_SUBJECT,
    LABELLER,
    LOCAL_GATEWAY,
    SERVERS_70B,
    chat,
    only,
    send,
    served,
    staging_token,
    token,
)
from .helpers import ROOT, Evaluated, prod_with_labeller_server, split_module_value
from .real_envoy import Gateway, signed_token


@pytest.fixture(scope="module")
def staging_envoy() -> Iterator[Gateway]:
    """staging's gateway, for the path of a Knative model without an endpoint picker (its labeller)."""
    from .helpers import raw_stack

    with real_envoy.running_gateway(Evaluated(raw_stack("staging"), shared=True).manifests()) as running:
        yield running


@pytest.fixture(scope="module")
def prod() -> Evaluated:
    return split_module_value("tests/test_gateway_in_envoy.py prod", lambda: Evaluated(prod_with_labeller_server(), shared=True))


# --- the pins ---------------------------------------------------------------------------------


def test_the_envoy_is_the_pinned_release_of_the_line_istios_proxy_is_built_on():
    assert real_envoy.envoy_version() == ENVOY.version
    for requirements in ("requirements-dev.txt", "constraints.txt"):
        assert f"{ENVOY.name}=={ENVOY.version}" in (ROOT / requirements).read_text().split(), requirements
    # Istio's proxy builds Envoy's 1.38 line after 1.38.3 (1.38.4-dev): its newest release.
    built_on = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)-dev", ISTIO_PROXY_ENVOY_VERSION)
    assert built_on is not None
    major, minor, patch = (int(part) for part in built_on.groups())
    assert ENVOY.version == f"{major}.{minor}.{patch - 1}"


def test_the_gateway_keeps_the_charts_service_ports():
    """The tier binds listeners where the chart's Service sends (real_envoy.CHART_LISTENER_PORTS);
    the platform's gateway values leave the chart's ports as they are."""
    from components.specs.mesh import gateway_values

    assert "ports" not in gateway_values(350, "internal")["service"]
    assert "ports" not in gateway_values(None, "internal")["service"]


def test_a_knative_model_without_a_picker_takes_its_second_pass_through_the_local_gateway(staging_envoy):
    response, received = send(staging_envoy, chat("labeller"), staging_token(tier="batch", sub="user-42"), server_port=80)
    assert response.status == 200, (response.body, staging_envoy.log()[-2000:])
    got = only(received)
    assert got.upstream == LABELLER
    # The local gateway routed it by the Host the first pass set; nothing of the first pass was
    # undone by the second (the filter runs once: the tier, the user and the body stay).
    assert got.header("host") == "labeller-v1.team-a.svc.cluster.local"
    assert got.header("x-tier") == "batch" and got.header("x-user-id") == "user-42"
    assert served(got)["model"] == "labeller"
    assert got.all("x-vllm-priority") == [str(served(got)["priority"])]


def test_the_local_gateway_takes_only_the_gateways_own_mesh_identity(staging_envoy):
    envoy = staging_envoy
    envoy.upstreams.take()
    body = chat("labeller")
    host = "labeller-v1.team-a.svc.cluster.local"
    # No client certificate: the ISTIO_MUTUAL server refuses the handshake.
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
        envoy.request(body=body, server_port=LOCAL_GATEWAY, host=host, reuse=False)
    # Another workload of the mesh (a tenant's pod) cannot send requests through it in the
    # gateway's name, token or not.
    for tok in (None, staging_token()):
        refused, received = send(envoy, body, tok, server_port=LOCAL_GATEWAY, host=host, client_certificate=envoy.intruder)
        assert refused.status == 403 and received == []
    # The gateway itself is served (that is the second pass).
    response, received = send(envoy, body, None, server_port=LOCAL_GATEWAY, host=host, client_certificate=envoy.certificates)
    assert response.status == 200 and only(received).upstream == LABELLER


# vLLM 0.33.0's admission refusals (vllm/exceptions.py MaxQueuedTokensError, QueueOverflowError).
PREFILL_BACKLOG_FULL = (
    "The engine has reached its prefill token backlog limit. Please try again later or on a different instance."
)
REQUEST_QUEUE_FULL = (
    "The engine is currently busy and cannot accept new requests. Please try again later or on a different instance."
)


def vllm_refusal(message: str) -> Answer:
    """What vLLM answers past an admission bound: a GracefulHTTPError as the OpenAI error body with code 503
    (vllm/entrypoints/serve/exception_handling/error_response.py), no Retry-After."""
    error = {"message": message, "type": "Service Unavailable", "param": None, "code": 503}
    return lambda _: (503, {"content-type": "application/json"}, json.dumps({"error": error}).encode())


def test_a_servers_503_is_told_when_to_come_back_and_not_retried(staging_envoy):
    """A Knative replica without a picker in front (staging's labeller) whose vLLM is at its admission bound answers
    at once, before it queues the request, as vLLM 0.33.0 writes it (tests/test_vllm_source.py: QueueOverflowError or
    MaxQueuedTokensError, a GracefulHTTPError rendered by vllm/entrypoints/serve/exception_handling/error_response.py
    as the OpenAI error body with code 503), no Retry-After. With no breaker in queue-proxy and no burst capacity
    (components/backends/knative.py) that is that path's bound once a replica is ready; the client is told the
    tier's Retry-After."""
    envoy = staging_envoy
    envoy.upstreams.take()
    for refusal in (PREFILL_BACKLOG_FULL, REQUEST_QUEUE_FULL):
        envoy.upstreams.answers[LABELLER] = vllm_refusal(refusal)
        response, received = send(envoy, chat("labeller"), staging_token(tier="batch"), server_port=80)
        envoy.upstreams.answers.clear()
        assert response.status == 503 and response.header("retry-after") == "60"
        # The routes retry only what never reached a server (connect-failure, refused-stream).
        assert len(received) == 1


def test_the_gateways_own_overflow_answer_is_told_when_to_come_back(prod):
    def no_room(config: dict[str, Any]) -> None:
        for cluster in config["static_resources"]["clusters"]:
            if cluster["name"] == SERVERS_70B.format(tier="standard"):
                cluster["circuit_breakers"]["thresholds"][0]["max_requests"] = 0
                cluster["circuit_breakers"]["thresholds"][0]["max_pending_requests"] = 0

    with real_envoy.running_gateway(prod.manifests(), bootstrap_hook=no_room) as envoy:
        response = envoy.request(body=chat("llama-3.1-70b-instruct"), token=token(tier="standard"))
        assert response.status == 503 and response.header("x-envoy-overloaded") == "true"
        assert response.header("retry-after") == "10"
        assert envoy.upstreams.take() == []


# --- the stand-in's successor ----------------------------------------------------------------------


def test_the_envoy_runs_the_rendered_filter_on_the_serving_listener_only(prod):
    """The Lua in the Envoy's config is the rendered EnvoyFilter's, byte for byte, on the public
    serving listener; neither the redirect listener nor Knative's local gateway runs it."""
    from components.constants import GATEWAY_SELECTOR

    from .istio_gateway import Certificates, GatewayObjects, bootstrap, listeners, upstream_names

    objects = GatewayObjects.from_manifests(prod.manifests(), GATEWAY_SELECTOR)
    numbers = [listener.number for listener in listeners(objects, real_envoy.CHART_LISTENER_PORTS)]
    config = bootstrap(
        objects,
        jwks="{}",
        listener_ports=real_envoy.CHART_LISTENER_PORTS,
        bound={number: 20000 + number for number in numbers},
        admin_port=1,
        upstreams={name: ("127.0.0.1", 1) for name in upstream_names(objects)},
        certificates=Certificates("c", "k", "ca", "mc", "mk"),
    )
    codes = {
        listener["name"]: [
            f["typed_config"]["default_source_code"]["inline_string"]
            for f in listener["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"]
            if f["name"] == "envoy.filters.http.lua"
        ]
        for listener in config["static_resources"]["listeners"]
    }
    assert set(codes) == {"0.0.0.0_443", "0.0.0.0_80", f"0.0.0.0_{LOCAL_GATEWAY}"}
    (code,) = codes["0.0.0.0_443"]
    assert code.endswith(Path(gateway_spec.LUA_SOURCE).read_text()) and code.startswith("local CONFIG = {")
    assert codes["0.0.0.0_80"] == [] and codes[f"0.0.0.0_{LOCAL_GATEWAY}"] == []


def test_the_gateway_benchmark_runs_and_measures_each_variant():
    """`make bench`'s real-Envoy benchmark at a tiny size, so it cannot rot."""
    from benchmarks.bench_filter import CASES
    from benchmarks.bench_gateway import VARIANTS, measure

    results = measure(1, {"1KB": 1 << 10}, most=5)
    # Every case ran through every variant (each request answered 200, run_batch checks it).
    assert [(label, case.label) for label, case, _ in results] == [("1KB", case.label) for case in CASES]
    assert all(set(cpu) == set(VARIANTS) and min(cpu.values()) >= 0 for _, _, cpu in results)


@pytest.fixture(scope="module")
def envoy_without_override_principals() -> Iterator[Gateway]:
    """prod with no `versionOverridePrincipals` and a second release override header."""
    raw = prod_with_labeller_server()
    del raw["traffic"]["authentication"]["versionOverridePrincipals"]
    raw["models"][0]["release"]["overrideHeader"] = "x-pin-version"
    with real_envoy.running_gateway(Evaluated(raw).manifests()) as running:
        yield running


def test_with_no_override_principals_nobody_may_pick_a_version(envoy_without_override_principals):
    envoy = envoy_without_override_principals
    for header, model in (("x-model-version", "llama-3.1-8b-instruct"), ("x-pin-version", "llama-3.1-70b-instruct")):
        for tok in (token(), token(sub=CANARY_ANALYSIS_SUBJECT)):
            response, received = send(envoy, chat(model), tok, headers={header: "v1"})
            assert response.status == 403 and received == [], (header, response.body)
        # Without the header both are served.
        assert send(envoy, chat(model), token())[0].status == 200


@pytest.mark.parametrize("stack", ["dev", "staging"])
def test_every_model_of_the_other_stacks_is_served_through_its_gateway(stack):
    """dev and staging serve plain HTTP on port 80 (the filter there, no redirect): each model, on
    each tier it serves, reaches its servers with a token of its tenant, and only so."""
    from .helpers import raw_stack, validate

    raw = raw_stack(stack)
    plan = validate(raw)
    auth = plan.config.traffic.authentication
    with real_envoy.running_gateway(Evaluated(raw).manifests()) as envoy:
        for route in plan.routes:
            for tier in {t.tier for t in route.tiers}:
                claims = {"iss": auth.issuer, "aud": auth.audiences[0], "sub": "u-1", "tier": tier, "tenant": route.model.tenant}
                response, received = send(envoy, chat(route.model.openai_name), signed_token(claims), server_port=80)
                assert response.status == 200, (route.model.openai_name, tier, response.body)
                got = only(received)
                assert got.header("x-tier") == tier and served(got)["model"] == route.model.openai_name
        anyone = next(iter(plan.routes)).model.openai_name
        assert send(envoy, chat(anyone), None, server_port=80)[0].status == 403
        body = chat(anyone)
        refused, received = send(envoy, body, None, server_port=LOCAL_GATEWAY, host="x.svc", client_certificate=envoy.intruder)
        assert refused.status == 403 and received == []
