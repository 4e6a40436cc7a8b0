"""The report's queue bounds (`queueBounds`): per model, tier and path, how long and how many
requests wait for a server, held against the objects the program renders for that path."""

from __future__ import annotations

import pytest
import yaml

from preview.sections import queue_bound_section

from .helpers import Evaluated, raw_stack


@pytest.fixture(scope="module")
def prod() -> Evaluated:
    return Evaluated(raw_stack("prod"), shared=True)


def rows_of(evaluated: Evaluated, model: str) -> dict[str, dict]:
    return {row["tier"]: row for row in evaluated.outputs["queueBounds"] if row["model"] == model}


def test_a_picker_path_waits_at_most_its_tiers_bound_and_band(prod):
    rows = rows_of(prod, "llama-3.1-70b-instruct")
    assert set(rows) == {"premium", "standard"}

    def config_map(name: str) -> dict:
        found = next(m for m in prod.manifests() if m["kind"] == "ConfigMap" and m["metadata"]["name"] == name)
        return yaml.safe_load(next(iter(found["data"].values())))

    flow = config_map("llama-70b-v1-epp")["flowControl"]
    (listener,) = [l for l in config_map("llama-70b-v1-epp-envoy")["static_resources"]["listeners"] if l["name"] == "vllm"]
    routes = listener["filter_chains"][0]["filters"][0]["typed_config"]["route_config"]["virtual_hosts"][0]["routes"]
    # Each tier's wait is two idle periods of its queued route (test_picker_proxy_in_envoy).
    waits = {r["name"].removesuffix("-queued"): 2 * float(r["route"]["idle_timeout"].removesuffix("s"))
             for r in routes if r["name"].endswith("-queued")}  # fmt: skip
    bands = {int(band["maxRequests"]) for band in flow["priorityBands"]}
    for tier, row in rows.items():
        assert row["path"] == "endpoint picker" and waits[tier] == row["boundSeconds"]
        assert row["boundRequests"] in bands
    assert (rows["premium"]["boundSeconds"], rows["standard"]["boundSeconds"]) == (5, 10)
    # The picker's own TTL, one for the pool, is the longest tier's: it never drops a request first.
    assert flow["defaultRequestTTL"] == "10s"
    assert rows["premium"]["answer"] == "503, Retry-After 5 s" and rows["standard"]["answer"] == "503, Retry-After 10 s"


def _vllm_flags(manifest: dict) -> dict[str, str]:
    (container,) = [c for c in manifest["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm"]
    words = container["args"]
    return {w: words[i + 1] for i, w in enumerate(words[:-1]) if w.startswith("--max-num-")}


def _server(evaluated: Evaluated, kind: str, name: str) -> dict:
    (found,) = [m for m in evaluated.manifests() if m["kind"] == kind and m["metadata"]["name"] == name]
    return found


def test_a_knative_path_behind_its_picker_is_timed_per_tier(prod):
    """The Knative 8B's versions sit behind endpoint pickers as the 70B's do: each tier waits at most its own bound
    in the picker, whose proxy dials the picked pod's queue-proxy (port 8012, so Knative's KPA counts the request),
    and the servers keep no admission bound of their own."""
    rows = rows_of(prod, "llama-3.1-8b-instruct")
    for tier, seconds in (("premium", 5), ("standard", 10)):
        row = rows[tier]
        assert (row["path"], row["boundSeconds"], row["boundRequestsPer"]) == ("endpoint picker", seconds, "picker")
        assert row["answer"] == f"503, Retry-After {seconds} s"
    # The batch tier is the batch model's, behind its own picker with batch's 60 s.
    assert (rows["batch"]["servedBy"], rows["batch"]["path"], rows["batch"]["boundSeconds"]) == (
        "llama-8b-batch",
        "endpoint picker",
        60,
    )
    for version in ("llama-8b-v1", "llama-8b-v2", "llama-8b-batch-v1"):
        service = _server(prod, "Service", version)
        assert service["apiVersion"].startswith("serving.knative.dev")
        assert "--max-num-queued-reqs" not in _vllm_flags(service) and "--max-num-queued-tokens" not in _vllm_flags(service)
        pool = _server(prod, "InferencePool", version)["spec"]
        assert pool["targetPorts"] == [{"number": 8012}]
        # The version's current revision, which Knative labels with its name.
        revision = service["spec"]["template"]["metadata"]["name"]
        assert pool["selector"]["matchLabels"] == {"serving.knative.dev/revision": revision}
        # The Service the picker's sidecar routes podIP:8012 by selects exactly the pool's pods.
        queue_proxy = _server(prod, "Service", f"{version}-queue-proxy")["spec"]
        assert queue_proxy["selector"] == pool["selector"]["matchLabels"]


def test_a_knative_path_without_a_picker_is_bounded_by_each_replicas_vllm():
    """Staging's labeller scales to zero, so no picker stands in front (it cannot wake a revision). Nothing waits in
    Knative (no queue-proxy breaker); vLLM admits ten waiting requests per running one, and only while the prompts
    ahead prefill within the shortest served tier's bound at the stack's measured rate. None of it times a wait for
    a running request to finish, so the row has no time bound."""
    staging = Evaluated(raw_stack("staging"), shared=True)
    (row,) = rows_of(staging, "labeller").values()
    service = _server(staging, "Service", "labeller-v1")
    assert service["spec"]["template"]["spec"]["containerConcurrency"] == 0
    flags = _vllm_flags(service)
    running = int(flags["--max-num-seqs"])
    assert int(flags["--max-num-queued-reqs"]) == 11 * running
    rate = next(m for m in raw_stack("staging")["models"] if m["name"] == "labeller")["server"]["prefillTokensPerSecond"]
    # batch's 60 s, the one tier it takes.
    assert int(flags["--max-num-queued-tokens"]) == 60 * rate
    assert (row["boundSeconds"], row["prefillBacklogSeconds"], row["boundRequestsPer"]) == (None, 60, "replica")
    assert row["boundRequests"] >= 10 * running
    assert row["path"].startswith("each replica's vLLM") and "--max-num-queued-tokens" in row["enforcedBy"]
    assert row["answer"].startswith("503 with Retry-After 60 s at once when the queue is full, else 504 after 600 s")


def test_a_picker_path_leaves_vllms_queue_to_the_picker(prod):
    flags = _vllm_flags(_server(prod, "Deployment", "llama-70b-v1"))
    assert "--max-num-queued-reqs" not in flags and "--max-num-queued-tokens" not in flags


def test_without_a_measured_rate_the_knative_path_is_bounded_in_requests_only():
    raw = raw_stack("staging")
    models = raw["models"]
    labeller = next(m for m in models if m["name"] == "labeller")
    del labeller["server"]["prefillTokensPerSecond"]
    staging = Evaluated(raw)
    (row,) = [r for r in staging.outputs["queueBounds"] if r["model"] == "labeller"]
    assert row["prefillBacklogSeconds"] is None and row["boundRequests"] is not None
    assert "--max-num-queued-tokens" not in row["enforcedBy"] and "else 504 after 600 s" in row["answer"]
    # It scales to zero: from there Knative's activator holds the request, untimed.
    assert row["answer"].endswith("; from zero replicas it waits for one, 504 after 600 s")
    flags = _vllm_flags(_server(staging, "Service", "labeller-v1"))
    assert "--max-num-queued-reqs" in flags and "--max-num-queued-tokens" not in flags


def test_every_row_names_the_gateways_pending_bound(prod):
    # The tiers' subsets (the egress gateway's, which carry TLS to it, have no HTTP pool).
    rules = [m for m in prod.manifests() if m["kind"] == "DestinationRule"]
    pending = {
        s["name"]: s["trafficPolicy"]["connectionPool"]["http"]["http1MaxPendingRequests"]
        for rule in rules
        for s in rule["spec"].get("subsets", [])
        if "connectionPool" in s.get("trafficPolicy", {})
    }
    for row in prod.outputs["queueBounds"]:
        assert row["gatewayPendingPerPod"] in set(pending.values())
    premium = rows_of(prod, "llama-3.1-70b-instruct")["premium"]
    assert premium["gatewayPendingPerPod"] == pending["v1-premium"]


def test_the_report_section_shows_every_row():
    # Staging's: its summarizer's tiers are timed by pickers, its scale-to-zero labeller's is not.
    rows = Evaluated(raw_stack("staging"), shared=True).outputs["queueBounds"]
    section = queue_bound_section({"queueBounds": rows})
    assert section is not None and section.markdown.count("\n") == len(rows) + 1
    bounded = sum(1 for r in rows if r["boundSeconds"] is not None)
    assert 0 < bounded < len(rows)
    assert section.summary.startswith(f"{bounded} of {len(rows)} model tiers wait at most their queue timeout")
    assert (
        "| labeller | batch | each replica's vLLM (Knative's activator while no replica is ready) "
        "| untimed (60 s of prefill) |" in section.markdown
    )
    assert queue_bound_section({}) is None
