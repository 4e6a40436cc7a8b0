"""The Grafana dashboards (components/specs/dashboards.py): every query reads a series that a
model's PrometheusRule records or an exporter exposes (and parses as PromQL under the real
`promtool`), every panel reads the `${datasource}` variable, a model's panels draw one line per
version, and the ConfigMaps are ones kube-prometheus-stack's sidecar loads."""

from __future__ import annotations

import json
import re
import subprocess
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.slo_plan import SloPlan
from components.specs.batch_rules import batch_prometheus_rule
from components.specs.dashboards import (
    DATASOURCE_VARIABLE,
    EXPORTER_SERIES,
    SIDECAR_LABEL,
    SIDECAR_LABEL_VALUE,
    dashboard_config_map,
    model_dashboard,
    platform_overview_dashboard,
)
from components.specs.gpu_memory import declared_mig_instances, gpu_memory_prometheus_rule
from components.specs.metrics import ksm_label
from components.specs.slo_rules import prometheus_rule

from .helpers import PreviewRun, raw_stack, validate

# A ConfigMap's data is limited to 1 MiB (Kubernetes validation, MaxSecretSize/ConfigMap size).
CONFIG_MAP_LIMIT = 1024 * 1024
# PromQL words that are no series: binary operators and grouping modifiers.
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset"}


def series_names(expr: str) -> set[str]:
    """The series names a PromQL expression reads: what is left once strings, label matchers,
    ranges and label lists are dropped, minus function names (followed by `(`) and keywords."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        following = text[match.end() :].lstrip()
        if following.startswith("(") or match.group() in KEYWORDS:
            continue
        names.add(match.group())
    return names


def targets(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for panel in dashboard["panels"] for t in panel["targets"]]


def recorded(slo: SloPlan) -> set[str]:
    return {r["record"] for g in prometheus_rule(slo)["spec"]["groups"] for r in g["rules"] if "record" in r}


PRICES = validate(raw_stack("prod")).node_prices_per_hour()


@pytest.fixture(scope="module")
def slos() -> list[SloPlan]:
    return [m.slo for m in validate(raw_stack("prod")).models]


@pytest.fixture(scope="module")
def dashboards(slos: list[SloPlan]) -> list[dict[str, Any]]:
    return [platform_overview_dashboard(PRICES, batch=True), *(model_dashboard(slo) for slo in slos)]


def batch_recorded() -> set[str]:
    """What the prod stack's batch queues' PrometheusRule records."""
    plan = validate(raw_stack("prod"))
    rule = batch_prometheus_rule(plan.batch_queues, [job.job for job in plan.batch_jobs])
    return {r["record"] for g in rule["spec"]["groups"] for r in g["rules"] if "record" in r}


def test_the_extractor_finds_series_and_skips_functions_labels_and_keywords() -> None:
    expr = (
        'sum by (tier) (rate(a:b:c{x="y{z}", le=~"1(\\\\.0)?"}[5m])) / on (tier) group_left (m) '
        "max by (m) (kube_pod_info) > bool 0"
    )
    assert series_names(expr) == {"a:b:c", "kube_pod_info"}


def test_a_models_panels_read_only_what_its_rule_records(slos: list[SloPlan]) -> None:
    for slo in slos:
        records = recorded(slo)
        used = {name for t in targets(model_dashboard(slo)) for name in series_names(t["expr"])}
        assert used and used <= records, (slo.model, used - records)
        # Every query is narrowed to this model's series.
        for t in targets(model_dashboard(slo)):
            assert f'model="{slo.model}", tenant="{slo.tenant}"' in t["expr"], t["expr"]


def test_a_misspelt_series_would_be_caught(slos: list[SloPlan]) -> None:
    """The check above can fail: a name no rule records is outside the records."""
    assert "model_version:vllm_time_to_first_token:p95" not in recorded(slos[0])
    assert series_names("max by (model_version) (model_version:vllm_time_to_first_token:p95)") - recorded(slos[0])


def test_the_overview_reads_recorded_or_exporter_series_only(slos: list[SloPlan]) -> None:
    gpu_memory = gpu_memory_prometheus_rule(declared_mig_instances(validate(raw_stack("prod")).pools.values()))
    gpu_recorded = {r["record"] for g in gpu_memory["spec"]["groups"] for r in g["rules"] if "record" in r}
    known = set().union(*(recorded(slo) for slo in slos)) | batch_recorded() | gpu_recorded | set(EXPORTER_SERIES)
    used = {name for t in targets(platform_overview_dashboard(PRICES, batch=True)) for name in series_names(t["expr"])}
    assert used <= known, used - known
    # Every exporter series listed is used: the list is no stale allowance.
    assert set(EXPORTER_SERIES) <= used


def test_the_batch_panels_show_each_tenants_queue_only_with_kueue() -> None:
    """With Kueue, the overview shows pending and admitted workloads and GPUs in use against the
    nominal quota and borrowed, per tenant; without it, no batch panel."""
    panels = [p for p in platform_overview_dashboard(PRICES, batch=True)["panels"] if p["title"].startswith("Batch")]
    read = {name for p in panels for t in p["targets"] for name in series_names(t["expr"])}
    assert (
        {
            "tenant:kueue_pending_workloads:sum",
            "tenant:kueue_admitted_active_workloads:sum",
            "tenant_flavor_resource:kueue_gpu_usage:sum",
            "tenant_flavor_resource:kueue_gpu_nominal_quota:sum",
            "tenant_flavor_resource:kueue_gpu_borrowed:sum",
        }
        <= read
        <= batch_recorded()
    )
    assert all(t["expr"].startswith("sum by (tenant") for p in panels if "tenant" in p["title"] for t in p["targets"])
    # GPU units are shown per resource: a whole GPU and a slice of each MIG profile are never added.
    gpu_targets = [t for p in panels for t in p["targets"] if "kueue_gpu" in t["expr"]]
    assert gpu_targets
    assert all(t["expr"].startswith("sum by (tenant, resource) (") and "{{resource}}" in t["legendFormat"] for t in gpu_targets)
    assert not [p for p in platform_overview_dashboard(PRICES)["panels"] if p["title"].startswith("Batch")]


def test_every_panel_and_query_reads_the_datasource_variable(dashboards: list[dict[str, Any]]) -> None:
    for dashboard in dashboards:
        [variable] = dashboard["templating"]["list"]
        assert (variable["name"], variable["type"], variable["query"]) == (DATASOURCE_VARIABLE, "datasource", "prometheus")
        for panel in dashboard["panels"]:
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
            assert all(t["datasource"] == panel["datasource"] for t in panel["targets"]), panel["title"]
        # No datasource uid written anywhere but the variable.
        assert '"uid": "prometheus"' not in json.dumps(dashboard)


def test_a_models_panels_draw_one_line_per_version(slos: list[SloPlan]) -> None:
    """Stable and canary side by side: every query's outermost aggregation keeps `model_version`
    (and nothing else), and the legend names the version."""
    for slo in slos:
        for t in targets(model_dashboard(slo)):
            assert t["legendFormat"] == "{{model_version}}"
            assert re.match(r"^(sum|max|avg) by \(model_version\) \(", t["expr"]), t["expr"]


def test_panels_do_not_overlap_and_ids_are_unique(dashboards: list[dict[str, Any]]) -> None:
    for dashboard in dashboards:
        cells = [(p["gridPos"]["x"], p["gridPos"]["y"]) for p in dashboard["panels"]]
        assert len(set(cells)) == len(cells)
        assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    assert len({d["uid"] for d in dashboards}) == len(dashboards)
    assert all(len(d["uid"]) <= 40 for d in dashboards)  # Grafana's limit on a dashboard uid


def test_config_maps_carry_the_sidecar_label_and_fit(dashboards: list[dict[str, Any]]) -> None:
    for dashboard in dashboards:
        cm = dashboard_config_map("x", "team-a", dashboard)
        assert cm["metadata"]["labels"][SIDECAR_LABEL] == SIDECAR_LABEL_VALUE == "1"
        [(key, text)] = cm["data"].items()
        assert key.endswith(".json") and json.loads(text) == dashboard
        assert len(text.encode()) < CONFIG_MAP_LIMIT


@pytest.fixture(scope="module")
def prod_preview(previews: dict[str, PreviewRun]) -> PreviewRun:
    """The prod stack as previewed for the run (the session's `previews`, the stacks side by side, once)."""
    return previews["prod"]


def test_the_preview_declares_the_dashboards_where_the_sidecar_looks(prod_preview: PreviewRun) -> None:
    run = prod_preview
    assert run.result.returncode == 0, run.result.stdout + run.result.stderr
    maps = {
        (m["metadata"]["namespace"], m["metadata"]["name"])
        for m in run.objects("ConfigMap")
        if m["metadata"].get("labels", {}).get(SIDECAR_LABEL) == "1"
    }
    models = validate(raw_stack("prod")).models
    assert maps == {("monitoring", "platform-overview")} | {(m.model.tenant, f"{m.model.name}-dashboard") for m in models}
    [release] = [r for r in run.of_type("kubernetes:helm.sh/v3:Release") if r["name"] == "monitoring-release"]
    values = release["inputs"]["values"]
    # Model dashboards live in their tenants' namespaces: the sidecar must search them all.
    assert values["grafana"]["sidecar"]["dashboards"]["searchNamespace"] == "ALL"


def test_every_kube_state_metrics_label_read_is_one_it_exports(prod_preview: PreviewRun) -> None:
    """kube-state-metrics exports a node's or pod's label only when the allowlist the monitoring
    release renders names it: every `label_*` a rendered rule or dashboard reads off
    `kube_node_labels` or `kube_pod_labels` must be allowed for that kind."""
    run = prod_preview
    [release] = [r for r in run.of_type("kubernetes:helm.sh/v3:Release") if r["name"] == "monitoring-release"]
    allowed: dict[str, set[str]] = {}
    for entry in release["inputs"]["values"]["kube-state-metrics"]["metricLabelsAllowlist"]:
        kind, _, keys = entry.partition("=")
        allowed[kind] = {ksm_label(key) for key in keys.strip("[]").split(",")}
    rules = [r["expr"] for rule in run.objects("PrometheusRule") for g in rule["spec"]["groups"] for r in g["rules"]]
    queries = [t["expr"] for m in run.objects("ConfigMap") if SIDECAR_LABEL in m["metadata"].get("labels", {})
               for d in m["data"].values() for t in targets(json.loads(d))]  # fmt: skip
    read = 0
    for expr in rules + queries:
        kinds = [kind for kind, series in (("nodes", "kube_node_labels"), ("pods", "kube_pod_labels")) if series in expr]
        labels = set(re.findall(r"\blabel_[A-Za-z0-9_]+", expr)) - {"label_replace"}
        if kinds and labels:
            read += 1
            assert labels <= set().union(*(allowed.get(kind, set()) for kind in kinds)), expr
    assert read >= 2, "no rule or query read a kube-state-metrics label"


@pytest.mark.real_server
def test_every_query_parses_under_promtool(promtool: str, dashboards: list[dict[str, Any]], tmp_path: Path) -> None:
    """Each query as the expression of a recording rule: `promtool check rules` parses it for real."""
    exprs = [t["expr"] for d in dashboards for t in targets(d)]
    rules = [{"record": f"dashboard:query:{i}", "expr": expr} for i, expr in enumerate(exprs)]
    path = tmp_path / "queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    # And a broken one fails, so the check can fail.
    path.write_text(yaml.safe_dump({"groups": [{"name": "d", "rules": [{"record": "x:y", "expr": "sum by (a (b)"}]}]}))
    assert subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60).returncode != 0


@pytest.mark.real_server
def test_the_cost_panel_is_each_pools_nodes_times_its_price(promtool: str, tmp_path: Path) -> None:
    """Three nodes of a pool at 55.04 an hour cost 165.12; two of another at 2.3, 4.6; a node of
    no pool (the system group) and a pool without a price cost nothing on the panel."""
    [cost] = [
        p
        for p in platform_overview_dashboard({"h100": Decimal("55.04"), "l4": Decimal("2.3")})["panels"]
        if p["title"].startswith("Cost")
    ]
    pool = ksm_label("inference.platform/pool")
    nodes = [("a", "h100"), ("b", "h100"), ("c", "h100"), ("d", "l4"), ("e", "l4"), ("f", "unpriced")]
    series = [
        {"series": f'kube_node_labels{{node="{node}", {pool}="{name}", job="kube-state-metrics"}}', "values": "1x20"}
        for node, name in nodes
    ]
    series.append({"series": 'kube_node_labels{node="system-1", job="kube-state-metrics"}', "values": "1x20"})
    rules = tmp_path / "empty.yaml"
    rules.write_text(yaml.safe_dump({"groups": []}))
    test = {
        "interval": "1m",
        "input_series": series,
        "promql_expr_test": [
            {
                "expr": f"round({cost['targets'][0]['expr']}, 0.001)",
                "eval_time": "5m",
                "exp_samples": [
                    {"labels": f'{{{pool}="h100"}}', "value": 165.12},
                    {"labels": f'{{{pool}="l4"}}', "value": 4.6},
                ],
            }
        ],
    }
    spec = tmp_path / "tests.yaml"
    spec.write_text(yaml.safe_dump({"rule_files": [rules.name], "evaluation_interval": "1m", "tests": [test]}))
    result = subprocess.run([promtool, "test", "rules", str(spec)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_without_prices_there_is_no_cost_panel() -> None:
    assert not [p for p in platform_overview_dashboard({})["panels"] if p["title"].startswith("Cost")]
