"""GPU memory and MIG on the dashboards (components/specs/gpu_memory.py): the rule the prod preview renders, the DCGM
series it reads as the pinned dcgm-exporter reports them, and under the real `promtool` the headroom alert fires on a
device running out and stays silent on one that serves, and the MIG records count what nodes report and declare."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from components.specs.dashboards import platform_overview_dashboard
from components.specs.gpu_memory import (
    DECLARED_MIG,
    FB_FREE,
    FB_RESERVED,
    FB_USED,
    HEADROOM_RATIO,
    REPORTED_MIG,
    RULE_NAME,
    USED_BYTES,
    declared_mig_instances,
    gpu_memory_prometheus_rule,
)

from .helpers import ROOT, raw_stack, validate
from .promtool_rules import fails, passes, run_tests
from .test_batch_rules import rules, rules_file
from .test_dashboards import series_names


def prod_rule() -> dict[str, Any]:
    plan = validate(raw_stack("prod"))
    return gpu_memory_prometheus_rule(declared_mig_instances(plan.pools.values()))


def test_the_rule_under_test_is_the_one_the_prod_preview_renders() -> None:
    resources = json.loads((ROOT / "tests" / "golden" / "prod.resources.json").read_text())
    [rendered] = [
        r["inputs"]
        for r in resources
        if r["type"] == "kubernetes:monitoring.coreos.com/v1:PrometheusRule" and r["inputs"]["metadata"]["name"] == RULE_NAME
    ]
    assert rendered["spec"] == prod_rule()["spec"]


def test_prod_declares_its_h100_geometry_per_node() -> None:
    """prod's h100 nodes: 4 whole GPUs, one GPU in 4 x 3g.40gb... as its pool's MIG config gives a node."""
    assert declared_mig_instances(validate(raw_stack("prod")).pools.values()) == {"h100": {"1g.10gb": 14, "3g.40gb": 4}}


def test_the_rule_reads_only_the_exporters_framebuffer_counters() -> None:
    """What it reads of DCGM: the three framebuffer counters dcgm-exporter 4.4.2-4.7.0 (gpu-operator v25.10.1's
    default) exports by default (its etc/default-counters.csv at that tag, MiB); everything else is its own records."""
    read = {name for r in rules(prod_rule()) for name in series_names(r["expr"])}
    records = {r["record"] for r in rules(prod_rule()) if "record" in r}
    assert read - records == {FB_USED, FB_FREE, FB_RESERVED}


def test_the_overview_shows_memory_and_mig_from_the_records() -> None:
    dashboard = platform_overview_dashboard({}, batch=False)
    exprs = {t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])}
    assert {USED_BYTES, HEADROOM_RATIO, REPORTED_MIG, DECLARED_MIG} <= exprs


@pytest.mark.real_server
def test_the_prod_rule_passes_promtool_check(promtool: str, tmp_path: Path) -> None:
    result = subprocess.run([promtool, "check", "rules", str(rules_file(tmp_path, prod_rule()))], capture_output=True, text=True)
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


def _device(node: str, gpu: str, pod: str, profile: str | None = None) -> str:
    mig = f', GPU_I_PROFILE="{profile}", GPU_I_ID="1"' if profile else ""
    return f'Hostname="{node}", gpu="{gpu}"{mig}, namespace="serving", pod="{pod}", job="gpu-operator/dcgm-exporter"'


@pytest.mark.real_server
def test_a_device_running_out_opens_a_ticket_and_one_serving_does_not(promtool: str, tmp_path: Path) -> None:
    """A 3g.40gb instance with 1 GiB of its 40 free (2.5%) for 20 minutes: a ticket; a whole H100 at vLLM's 90%
    (8 GiB free of 80): silent, with its used bytes and headroom recorded."""
    full, serving = _device("node-a", "0", "llama-8b-v1-0", "3g.40gb"), _device("node-b", "1", "llama-70b-v1-0")
    series = [
        {"series": f"{FB_USED}{{{full}}}", "values": "39936x25"},
        {"series": f"{FB_FREE}{{{full}}}", "values": "1024x25"},
        {"series": f"{FB_RESERVED}{{{full}}}", "values": "0x25"},
        {"series": f"{FB_USED}{{{serving}}}", "values": "73728x25"},
        {"series": f"{FB_FREE}{{{serving}}}", "values": "8192x25"},
        {"series": f"{FB_RESERVED}{{{serving}}}", "values": "0x25"},
    ]
    fired = {
        "eval_time": "20m",
        "alertname": "GpuMemoryHeadroomLow",
        "exp_alerts": [
            {
                "exp_labels": {
                    "severity": "ticket",
                    "Hostname": "node-a",
                    "gpu": "0",
                    "GPU_I_PROFILE": "3g.40gb",
                    "GPU_I_ID": "1",
                    "namespace": "serving",
                    "pod": "llama-8b-v1-0",
                },
                "exp_annotations": {
                    "summary": "GPU memory of node-a GPU 0 3g.40gb runs out",
                    "description": "Less than 5% of the device's memory has been free for 15m (2.5%), held by "
                    "serving/llama-8b-v1-0: beyond the share vLLM takes, the next allocation fails.",
                    "runbook_url": "docs/design/slo.md#gpu-memory-headroom-low",
                },
            }
        ],
    }
    recorded = {
        "eval_time": "20m",
        "expr": f'{HEADROOM_RATIO}{{Hostname="node-b"}}',
        "exp_samples": [
            {
                "labels": f'{HEADROOM_RATIO}{{Hostname="node-b", gpu="1", namespace="serving", pod="llama-70b-v1-0"}}',
                "value": 0.1,
            }
        ],
    }
    path = rules_file(tmp_path, prod_rule())
    test = {"interval": "1m", "input_series": series, "alert_rule_test": [fired], "promql_expr_test": [recorded]}
    passes(run_tests(promtool, tmp_path, path, [test]))
    # Not after 10 minutes: the alert waits 15.
    early = {**test, "alert_rule_test": [{**fired, "eval_time": "10m"}], "promql_expr_test": []}
    fails(run_tests(promtool, tmp_path, path, [early]))


@pytest.mark.real_server
def test_the_mig_records_count_what_nodes_report_beside_what_pools_declare(promtool: str, tmp_path: Path) -> None:
    """A node reporting 2 of the 4 3g.40gb instances its pool declares: the two records side by side."""
    series = [
        {"series": f"{FB_USED}{{{_device('node-a', str(gpu), f'p{gpu}', '3g.40gb')}}}", "values": "1x5"} for gpu in range(2)
    ]
    test = {
        "interval": "1m",
        "input_series": series,
        "promql_expr_test": [
            {
                "eval_time": "2m",
                "expr": REPORTED_MIG,
                "exp_samples": [{"labels": f'{REPORTED_MIG}{{Hostname="node-a", GPU_I_PROFILE="3g.40gb"}}', "value": 2}],
            },
            {
                "eval_time": "2m",
                "expr": f'{DECLARED_MIG}{{GPU_I_PROFILE="3g.40gb"}}',
                "exp_samples": [{"labels": f'{DECLARED_MIG}{{pool="h100", GPU_I_PROFILE="3g.40gb"}}', "value": 4}],
            },
        ],
    }
    passes(run_tests(promtool, tmp_path, rules_file(tmp_path, prod_rule()), [test]))
