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


def test_a_knative_path_has_no_time_bound_and_queue_proxys_depth(prod):
    rows = rows_of(prod, "llama-3.1-8b-instruct")
    (service,) = [m for m in prod.manifests() if m["kind"] == "Service" and m["metadata"]["name"] == "llama-8b-v1"
                  and m["apiVersion"].startswith("serving.knative.dev")]  # fmt: skip
    concurrency = service["spec"]["template"]["spec"]["containerConcurrency"]
    for tier in ("premium", "standard"):
        row = rows[tier]
        assert row["boundSeconds"] is None and row["boundRequests"] == 10 * concurrency and row["boundRequestsPer"] == "replica"
        assert row["path"].startswith("each replica's queue-proxy") and row["answer"].endswith(("after 120 s", "after 300 s"))
    # The batch tier is the batch model's, queued there.
    assert rows["batch"]["servedBy"] == "llama-8b-batch"


def test_every_row_names_the_gateways_pending_bound(prod):
    rules = [m for m in prod.manifests() if m["kind"] == "DestinationRule"]
    pending = {
        s["name"]: s["trafficPolicy"]["connectionPool"]["http"]["http1MaxPendingRequests"]
        for rule in rules
        for s in rule["spec"].get("subsets", [])
    }
    for row in prod.outputs["queueBounds"]:
        assert row["gatewayPendingPerPod"] in set(pending.values())
    premium = rows_of(prod, "llama-3.1-70b-instruct")["premium"]
    assert premium["gatewayPendingPerPod"] == pending["v1-premium"]


def test_the_report_section_shows_every_row(prod):
    rows = prod.outputs["queueBounds"]
    section = queue_bound_section({"queueBounds": rows})
    assert section is not None and section.markdown.count("\n") == len(rows) + 1
    bounded = sum(1 for r in rows if r["boundSeconds"] is not None)
    assert section.summary.startswith(f"{bounded} of {len(rows)} model tiers")
    assert (
        "| llama-3.1-8b-instruct | standard | each replica's queue-proxy (Knative's activator while no replica is ready) "
        "| no time bound |" in section.markdown
    )
    assert queue_bound_section({}) is None
