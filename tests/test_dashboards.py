"""The Grafana dashboards (components/specs/dashboards.py): every query reads a series that a
model's PrometheusRule records or an exporter exposes (and parses as PromQL under the real
`promtool`), every panel reads the `${datasource}` variable, a model's panels draw one line per
version, and the ConfigMaps are ones kube-prometheus-stack's sidecar loads."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.specs.dashboards import (
    DATASOURCE_VARIABLE,
    EXPORTER_SERIES,
    SIDECAR_LABEL,
    SIDECAR_LABEL_VALUE,
    dashboard_config_map,
    model_dashboard,
    platform_overview_dashboard,
)
from components.specs.slo_rules import SloPlan, prometheus_rule

from .helpers import PreviewRun, raw_stack, run_preview, validate

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


@pytest.fixture(scope="module")
def slos() -> list[SloPlan]:
    return [m.slo for m in validate(raw_stack("prod")).models]


@pytest.fixture(scope="module")
def dashboards(slos: list[SloPlan]) -> list[dict[str, Any]]:
    return [platform_overview_dashboard(), *(model_dashboard(slo) for slo in slos)]


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
    known = set().union(*(recorded(slo) for slo in slos)) | set(EXPORTER_SERIES)
    used = {name for t in targets(platform_overview_dashboard()) for name in series_names(t["expr"])}
    assert used <= known, used - known
    # Every exporter series listed is used: the list is no stale allowance.
    assert set(EXPORTER_SERIES) <= used


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
def prod_preview(tmp_path_factory: pytest.TempPathFactory) -> PreviewRun:
    """The prod stack previewed alone (the session's `previews` runs every stack: slower)."""
    out = tmp_path_factory.mktemp("dashboards-prod")
    return PreviewRun("prod", out, run_preview("--stack", "prod", "--out", str(out)))


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
