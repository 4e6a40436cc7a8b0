"""The synthetic series of the canary tests (tests/test_canary.py, `make canary-try`): a healthy, a slow, an
erroring, a shedding, a barely used, a lone canary and one whose picker sheds, each in its own hour of the
same TSDB, beside series the queries must never read."""

from __future__ import annotations

from collections.abc import Callable

from .servers.prometheus import SyntheticSeries, two_buckets

NAMESPACE, APP, SERVED = "serving", "llama-8b", "llama-3.1-8b-instruct"
# vLLM 0.18.0's TTFT buckets (vllm/v1/metrics/loggers.py PrometheusStatLogger in its source release,
# held to it by tests/test_vllm_metrics.py); the Istio ones are any.
TTFT_BOUNDS = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
    160.0, 640.0, 2560.0,
]  # fmt: skip
E2E_BOUNDS: list[float] = [1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000]
FAST_TTFT, SLOW_TTFT = two_buckets(0.1, 0.25), two_buckets(0.25, 0.5)  # p95 175 ms, 375 ms
FAST_E2E, SLOW_E2E = two_buckets(1000, 2500), two_buckets(2500, 5000)  # p95 1750 ms, 3750 ms

# Every scenario ends on its own hour, hours before now (backfilled data must lie in the past).
HOUR = 3600
END = (int(__import__("time").time()) // HOUR - 3) * HOUR
SCENARIOS = ("healthy", "slow", "erroring", "shedding", "little", "alone", "picker-shedding")
AT = {name: END - index * HOUR for index, name in enumerate(SCENARIOS)}

# (requests per second by tier, share of 500s, share of 503s, TTFT, e2e) of each version.
VersionShape = tuple[dict[str, float], float, float, Callable[[float], float], Callable[[float], float]]
STABLE: VersionShape = ({"premium": 1.0, "standard": 2.0}, 0.002, 0.01, FAST_TTFT, FAST_E2E)
CANARY: VersionShape = ({"premium": 0.2, "standard": 0.3}, 0.004, 0.01, FAST_TTFT, FAST_E2E)
SHAPES: dict[str, dict[str, VersionShape]] = {
    "healthy": {"v1": STABLE, "v2": CANARY},
    "slow": {"v1": STABLE, "v2": (CANARY[0], 0.004, 0.01, SLOW_TTFT, SLOW_E2E)},
    "erroring": {"v1": STABLE, "v2": (CANARY[0], 0.05, 0.01, FAST_TTFT, FAST_E2E)},
    "shedding": {"v1": STABLE, "v2": (CANARY[0], 0.004, 0.10, FAST_TTFT, FAST_E2E)},
    "little": {"v1": STABLE, "v2": ({"premium": 0.05, "standard": 0.1}, 0.004, 0.01, FAST_TTFT, FAST_E2E)},
    "alone": {"v2": ({"premium": 1.0, "standard": 2.0}, 0.004, 0.01, FAST_TTFT, FAST_E2E)},
    "picker-shedding": {"v1": STABLE, "v2": CANARY},
}
# Requests per second the canary's picker path refuses in "picker-shedding", by tier: they never
# reach a pod, so only the picker pods' sidecar counts them (429 with a dropped reason).
PICKER_SHED = {"premium": 0.02, "standard": 0.05}


def _istio(app: str, version: str, tier: str, code: str, reporter: str = "destination") -> dict[str, str]:
    return {
        "reporter": reporter,
        "destination_workload_namespace": NAMESPACE,
        "destination_app": app,
        "destination_version": version,
        "destination_workload": f"{app}-{version}",
        "tier": tier,
        "response_code": code,
        "namespace": NAMESPACE,
        "pod": f"{app}-{version}-0",
    }


def _version(data: SyntheticSeries, end: int, version: str, shape: VersionShape, app: str = APP, served: str = SERVED) -> None:
    tiers, errors, shed, ttft, e2e = shape
    start = end - 40 * 60
    for tier, rate in tiers.items():
        for code, share in (("200", 1 - errors - shed), ("500", errors), ("503", shed)):
            data.counter("istio_requests_total", _istio(app, version, tier, code), start, end, rate * share, base=1000)
        data.histogram(
            "istio_request_duration_milliseconds",
            _istio(app, version, tier, "200"),
            E2E_BOUNDS,
            e2e,
            start,
            end,
            rate * (1 - errors - shed),
        )
        # Shed answers come back at once: a p95 counting them would flatter a shedding canary.
        data.histogram(
            "istio_request_duration_milliseconds",
            _istio(app, version, tier, "503"),
            E2E_BOUNDS,
            two_buckets(1, 5),
            start,
            end,
            rate * shed,
        )
        # The gateway's view of the same requests (reporter="source") is never read.
        data.counter("istio_requests_total", _istio(app, version, tier, "500", reporter="source"), start, end, rate, base=10)
    vllm = {"namespace": NAMESPACE, "model_name": served, "model_version": version, "engine": "0", "pod": f"{app}-{version}-0"}
    data.histogram("vllm:time_to_first_token_seconds", vllm, TTFT_BOUNDS, ttft, start, end, sum(tiers.values()))


def _picker(data: SyntheticSeries, end: int, picker: str, tier: str, code: str, rate: float, namespace: str = NAMESPACE) -> None:
    """What the sidecar of a version's picker pods reports: Istio's labels for a Deployment without
    `app`/`version` labels of the model (the picker pods never carry them)."""
    labels = {
        "reporter": "destination",
        "destination_workload_namespace": namespace,
        "destination_app": picker,
        "destination_version": "unknown",
        "destination_workload": picker,
        "tier": tier,
        "response_code": code,
        "namespace": namespace,
        "pod": f"{picker}-0",
    }
    data.counter("istio_requests_total", labels, end - 40 * 60, end, rate, base=100)


def synthetic() -> SyntheticSeries:
    data = SyntheticSeries()
    for name, versions in SHAPES.items():
        for version, shape in versions.items():
            _version(data, AT[name], version, shape)
            picker = f"{APP}-{version}-epp"
            for tier, rate in shape[0].items():
                # The picked requests' answers pass the picker pods too (the servers' 503s among
                # them): the servers' sidecars count those.
                _picker(data, AT[name], picker, tier, "200", rate)
                _picker(data, AT[name], picker, tier, "503", rate / 10)
            # The same picker name in another tenant's namespace, refusing everything: never read.
            _picker(data, AT[name], picker, "standard", "429", 5.0, namespace="other-tenant")
        if name == "picker-shedding":
            for tier, rate in PICKER_SHED.items():
                _picker(data, AT[name], f"{APP}-v2-epp", tier, "429", rate)
        # Another model's canary picker, refusing everything: never read.
        _picker(data, AT[name], "llama-1b-v2-epp", "premium", "429", 5.0)
        # Another model of the tenant with the same version names, failing and slow: never read.
        bad = ({"premium": 5.0}, 0.5, 0.3, SLOW_TTFT, SLOW_E2E)
        _version(data, AT[name], "v1", bad, app="llama-1b", served="llama-3.2-1b-instruct")
        _version(data, AT[name], "v2", bad, app="llama-1b", served="llama-3.2-1b-instruct")
    return data
