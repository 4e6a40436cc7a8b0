"""The canary verdict's rules on given figures, which version's picker it queries, and bad input to the tool
(flags, stack files, deployed outputs, an unreachable or malformed Prometheus): exit 2 naming what is
wrong."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pytest

from platform_config.models import CanaryAnalysis
from platform_tools.__main__ import canary_target, load_platform
from platform_tools.canary import CanaryMetrics, Traffic, VersionMetrics, queries
from platform_tools.canary_verdict import verdict
from preview.stack_config import load_project

from .canary_helpers import PROD_RELEASE, _run, _stack
from .helpers import ROOT, mirror_show, stack_file


def test_the_verdict_queries_a_versions_picker_only_where_it_has_one():
    staging = load_platform(load_project(ROOT), "staging", stack_file("staging"))
    summarizer = next(m for m in staging.models if m.name == "summarizer")  # hpa: a picker per version
    target = canary_target(staging, summarizer)
    assert target.picker_workloads == {"summarizer-v1-epp": "v1", "summarizer-v2-epp": "v2"}
    assert "picker_shed" in queries(target, "30m")
    prod = load_platform(load_project(ROOT), "prod", stack_file("prod"))
    knative = canary_target(prod, next(m for m in prod.models if m.name == "llama-8b"))  # kpa: pickers too
    assert knative.picker_workloads == {"llama-8b-v1-epp": "v1", "llama-8b-v2-epp": "v2"}
    assert "picker_shed" in queries(knative, "30m")
    # A model without pickers has none to query.
    unpicked = summarizer.model_copy(update={"endpoint_picker": summarizer.endpoint_picker.model_copy(update={"enabled": False})})
    target = canary_target(staging, unpicked)
    assert target.picker_workloads == {} and "picker_shed" not in queries(target, "30m")


def _metrics(stable: dict[str, Any], canary: dict[str, Any]) -> CanaryMetrics:
    return CanaryMetrics(VersionMetrics("v1", **stable), VersionMetrics("v2", **canary), "30m", 0.0)


def _traffic(requests: float, errors: float = 0, shed: float = 0) -> Traffic:
    return Traffic(requests, errors, shed)


def test_a_canary_over_the_ttft_target_is_rolled_back_while_the_stable_one_meets_it():
    fast = {"total": _traffic(1000), "ttft_p95_ms": 480.0, "e2e_p95_ms": 900.0}
    over = {**fast, "ttft_p95_ms": 520.0}  # within 1.2 x stable's: only the target catches it
    result = verdict(_metrics(fast, over), CanaryAnalysis(), 500, 10)
    assert result.action == "rollback"
    assert result.reasons == ("all tiers: canary TTFT p95 520 ms > target 500 ms while stable's 480 ms is within",)
    # Both over the target: the profile's target is missed by the stable version too, not the canary's fault.
    assert verdict(_metrics({**fast, "ttft_p95_ms": 510.0}, over), CanaryAnalysis(), 500, 10).action == "promote"


def test_one_tier_breaching_rolls_back_and_a_tier_with_few_requests_is_not_judged():
    stable = {"total": _traffic(2000, 2), "tiers": {"premium": _traffic(1000, 1), "batch": _traffic(1000, 1)}}
    stable |= {"ttft_p95_ms": 100.0, "e2e_p95_ms": 900.0}
    canary = {"total": _traffic(700, 6), "tiers": {"premium": _traffic(400, 0), "batch": _traffic(300, 6)}}
    canary |= {"ttft_p95_ms": 100.0, "e2e_p95_ms": 900.0}
    result = verdict(_metrics(stable, canary), CanaryAnalysis(), None, 10)
    assert result.action == "rollback" and result.reasons == (
        "batch: canary 5xx rate (not 503) 2.00% > 1.00% and > stable's 0.10%",
    )
    few = {**canary, "tiers": {"premium": _traffic(500, 0), "batch": _traffic(200, 6)}}
    result = verdict(_metrics(stable, few), CanaryAnalysis(), None, 10)
    assert result.action == "promote"
    assert [c.outcome for c in result.checks if c.scope == "batch"] == ["too few"]


def test_missing_latency_figures_hold_rather_than_promote():
    healthy = {"total": _traffic(1000), "ttft_p95_ms": 100.0, "e2e_p95_ms": 900.0}
    result = verdict(_metrics(healthy, {**healthy, "ttft_p95_ms": None}), CanaryAnalysis(), 500, 10)
    assert result.action == "hold" and any("TTFT" in r for r in result.reasons)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["prod", "nope", "--prometheus", "http://127.0.0.1:9"], "no model 'nope' in the stack; models: llama-70b, llama-8b"),
        (["prod", "llama-70b", "--prometheus", "http://127.0.0.1:9"], "model 'llama-70b' has no canary"),
        (["prod", "llama-8b", "--prometheus", "http://127.0.0.1:9", "--at", "yesterday"], "--at 'yesterday' is neither"),
        (["prod", "llama-8b", "--prometheus", "http://127.0.0.1:9", "--at", "nan"], "--at 'nan' is not a time"),
        (["prod", "llama-8b", "--prometheus", "file:///etc/passwd"], "--prometheus 'file:///etc/passwd' is not an http(s) URL"),
        (["nostack", "llama-8b", "--prometheus", "http://127.0.0.1:9"], "no stack file"),
    ],
)
def test_bad_input_exits_2_with_the_flag_or_key_named(capsys, args, message):
    code, out, err = _run(capsys, *args)
    assert (code, out) == (2, "")
    assert err.startswith("error: ") and message in err


def test_an_invalid_stack_file_exits_2_naming_the_key(capsys, tmp_path):
    path = _stack(tmp_path, PROD_RELEASE.replace("canaryWeight: 10", "canaryWeight: 15"))
    code, _, err = _run(capsys, "prod", "llama-8b", "--prometheus", "http://127.0.0.1:9", "--stack-file", str(path))
    assert code == 2 and "inference-platform:models[1].release" in err and "canaryWeight 15 is not a step" in err


def test_an_unreachable_prometheus_exits_2_without_a_traceback():
    run = subprocess.run(
        [sys.executable, "-m", "platform_tools", "canary", "prod", "llama-8b", "--prometheus", "http://127.0.0.1:9"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.startswith("error: cannot query Prometheus at http://127.0.0.1:9 (--prometheus / PROMETHEUS_URL): ")
    assert len(run.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "body, message",
    [
        (
            b'{"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, "abc"]}]}}',
            "a sample that is not one",
        ),
        (b'{"status": "success", "data": {"resultType": "vector", "result": [{"value": [1, "1"]}]}}', "a sample that is not one"),
        (b'{"status": "success", "data": "nope"}', "not a vector"),
        (b'{"status": "success", "data": {"resultType": "matrix", "result": []}}', "not a vector"),
        (b"[" * 100_000, "not JSON"),
        (b"x" * (5 << 20), "more than 4 MiB"),
    ],
)
def test_a_malformed_prometheus_answer_exits_2_without_a_traceback(capsys, tmp_path, body, message):
    """A Prometheus (or whatever answers at that URL) sending a body of another shape: exit 2, the
    URL and what was wrong, never a crash."""
    import http.server
    import threading

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the stdlib's name
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        code, out, err = _run(capsys, "prod", "llama-8b", "--prometheus", url, "--stack-file", str(_stack(tmp_path)))
    finally:
        server.shutdown()
    assert (code, out) == (2, "") and err.startswith(f"error: Prometheus at {url} answered") and message in err


@pytest.mark.parametrize(
    "outputs, message",
    [
        ("{not json", "not JSON"),
        ('{"canaryReleases": {"llama-70b": {"stable": "v1", "canary": null, "canaryWeight": 0}}}', "no canaryReleases entry"),
        ('{"canaryReleases": {"llama-8b": "v1"}}', "canaryReleases.llama-8b is not a release"),
        ("[]", "not a JSON object"),
    ],
)
def test_bad_deployed_outputs_exit_2_naming_the_flag_or_output(capsys, tmp_path, outputs, message):
    deployed = tmp_path / "outputs.json"
    deployed.write_text(outputs)
    args = ["prod", "llama-8b", "--prometheus", "http://127.0.0.1:9", "--stack-file", str(_stack(tmp_path))]
    code, out, err = _run(capsys, *args, "--deployed", str(deployed))
    assert code == 2 and message in err and "Traceback" not in err, err


@pytest.mark.upstream_source
def test_the_refusal_code_counted_is_the_pickers_own_for_backpressure_and_no_servers():
    """429 is what the llm-d router at the pinned tag answers for backpressure (pkg/common/error/
    error.go BuildErrResponse: ResourceExhausted -> TooManyRequests), what the picker's proxy
    answers every refusal with, and what vLLM's OpenAI server never answers (vllm/entrypoints of
    the pinned source release), so the picker pods' 429s are the picker path's refusals alone."""
    from components.specs.endpoint_picker.envoy_routes import REFUSED
    from platform_config.pins import LLM_D_ROUTER_VERSION
    from platform_tools.canary import PICKER_REFUSED_CODE

    from .endpoint_picker_helpers import MIRROR
    from .helpers import vllm_release

    errors = mirror_show(MIRROR, f"v{LLM_D_ROUTER_VERSION}", "pkg/common/error/error.go")
    assert re.search(r"case ResourceExhausted:\s*httpCode = envoyTypePb\.StatusCode_TooManyRequests", errors)
    assert PICKER_REFUSED_CODE == str(REFUSED) == "429"
    release = vllm_release()
    # The Anthropic frontend only maps status codes to its error names.
    served = [path for path in release.files("vllm/entrypoints/") if path.endswith(".py") and "/anthropic/" not in path]
    # Any spelling of the code: HTTPStatus.TOO_MANY_REQUESTS, HTTPStatus(429), status_code=429.
    answering = re.compile(r"TOO_MANY_REQUESTS|(?<![0-9])429(?![0-9])")
    assert served and not [p for p in served if answering.search(release.text(p))]
