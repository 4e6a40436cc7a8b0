"""The batch queues' rules (components/specs/batch_rules.py): they read only what Kueue 0.19.2 and
kube-state-metrics export (or what they record themselves), Kueue's series as the leader reports
them, and under the real `promtool` each alert fires on a breach and stays silent otherwise."""

from __future__ import annotations

import copy
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.specs.batch_rules import BATCH_SOURCE_SERIES, REPEATED_PREEMPTIONS, batch_prometheus_rule
from components.specs.kueue import KUEUE_UNUSED_POD_INTEGRATIONS, kueue_values
from platform_config.gpu_catalog import MIG_RESOURCE_PREFIX
from platform_config.pins import KUBE_PROMETHEUS_STACK, KUEUE

from .batch_helpers import KUEUE_MIRROR
from .helpers import ROOT, mirror_show, raw_stack, validate
from .promtool_rules import fails, passes, prom_labels, run_tests, strip_annotations
from .test_dashboards import series_names

TAG = f"v{KUEUE.version}"
HELM_CHARTS_MIRROR = Path("prometheus-community+helm-charts")  # read in ../shared/upstream-sources
KSM_MIRROR = Path("kubernetes+kube-state-metrics")  # read in ../shared/upstream-sources


def prod_rule(raw: dict[str, Any] | None = None) -> dict[str, Any]:
    """The rule as the Kueue component builds it: from the plan's batch queues and jobs."""
    plan = validate(raw if raw is not None else raw_stack("prod"))
    return batch_prometheus_rule(plan.batch_queues, [job.job for job in plan.batch_jobs])


def test_the_rule_under_test_is_the_one_the_prod_preview_renders() -> None:
    """prod_rule builds what the program declares (the recorded prod preview, itself held
    against a fresh preview by test_golden_outputs.py), so the promtool cases below test it."""
    resources = json.loads((ROOT / "tests" / "golden" / "prod.resources.json").read_text())
    [rendered] = [
        r["inputs"]
        for r in resources
        if r["type"] == "kubernetes:monitoring.coreos.com/v1:PrometheusRule" and r["inputs"]["metadata"]["name"] == "batch-queues"
    ]
    assert rendered["spec"] == prod_rule()["spec"]


def rules(rule: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for g in rule["spec"]["groups"] for r in g["rules"]]


def recorded(rule: dict[str, Any]) -> set[str]:
    return {r["record"] for r in rules(rule) if "record" in r}


def test_every_series_read_is_recorded_or_exported_by_a_named_source() -> None:
    rule = prod_rule()
    used = {name for r in rules(rule) for name in series_names(r["expr"])}
    assert used <= recorded(rule) | set(BATCH_SOURCE_SERIES), used - recorded(rule) - set(BATCH_SOURCE_SERIES)
    # Every source listed is read: the catalog is no stale allowance.
    assert set(BATCH_SOURCE_SERIES) <= used


def test_kueues_series_are_metrics_of_the_pinned_release() -> None:
    """Each `kueue_*` series the rules read is a metric of pkg/metrics/metrics.go at the tag
    (subsystem `kueue`), with the labels the rules read."""
    source = mirror_show(KUEUE_MIRROR, TAG, "pkg/metrics/metrics.go")
    read = {name: text for name, text in BATCH_SOURCE_SERIES.items() if name.startswith("kueue_")}
    assert read
    for name in read:
        declared = re.search(
            r'Subsystem: constants\.KueueName,\s*Name:\s*"' + re.escape(name.removeprefix("kueue_")) + r'",.*?\}, (.*?)\n',
            source,
            re.S,
        )
        assert declared, name
        labels = declared.group(1)
        assert '"replica_role"' in labels, name
        assert ('"cluster_queue"' in labels) or ('"namespace"' in labels and '"name"' in labels), (name, labels)
    # A misspelt metric would not be found.
    assert 'Name:      "cluster_queue_gpu_usage"' not in source


def test_kube_state_metrics_series_are_job_metrics_of_the_version_kube_prometheus_stack_runs() -> None:
    """kube-prometheus-stack at its pin depends on one kube-state-metrics chart, which runs its
    appVersion's image with the `jobs` collector on by default; at that version each
    `kube_job_*` series the rules read is a STABLE Job metric labelled namespace and job_name
    (kube_job_failed also `condition`)."""
    stack_tag = f"kube-prometheus-stack-{KUBE_PROMETHEUS_STACK.version}"
    stack = yaml.safe_load(mirror_show(HELM_CHARTS_MIRROR, stack_tag, "charts/kube-prometheus-stack/Chart.yaml"))
    [dependency] = [d for d in stack["dependencies"] if d["name"] == "kube-state-metrics"]
    chart_tag = f"kube-state-metrics-{dependency['version']}"
    chart = yaml.safe_load(mirror_show(HELM_CHARTS_MIRROR, chart_tag, "charts/kube-state-metrics/Chart.yaml"))
    values = yaml.safe_load(mirror_show(HELM_CHARTS_MIRROR, chart_tag, "charts/kube-state-metrics/values.yaml"))
    assert values["image"]["tag"] == "" and "jobs" in values["collectors"]
    # Nor does the stack's own values override the subchart's image or collectors.
    overrides = yaml.safe_load(mirror_show(HELM_CHARTS_MIRROR, stack_tag, "charts/kube-prometheus-stack/values.yaml"))
    assert not {"image", "collectors"} & set(overrides["kube-state-metrics"])
    source = mirror_show(KSM_MIRROR, f"v{chart['appVersion']}", "internal/store/job.go")
    read = [name for name in BATCH_SOURCE_SERIES if name.startswith("kube_job_")]
    assert len(read) == 5
    for name in read:
        assert re.search(r'"' + name + r'",\s*"[^"]*",\s*metric\.Gauge,\s*basemetrics\.STABLE,', source), name
    assert 'descJobLabelsDefaultLabels = []string{"namespace", "job_name"}' in source
    failed = source[source.index('"kube_job_failed"') :]
    assert 'metric.LabelKeys = []string{"condition"}' in failed[: failed.index("NewFamilyGenerator")]
    # A misspelt metric would not be found.
    assert '"kube_job_status_failed_time"' not in source


def test_kueues_series_are_read_as_the_leader_reports_them() -> None:
    for r in rules(prod_rule()):
        for selector in re.findall(r"kueue_[a-z_]+\{([^}]*)\}", r["expr"]):
            assert 'replica_role="leader"' in selector, r["expr"]


def test_the_resource_and_local_queue_metrics_are_on() -> None:
    """Kueue reports the ClusterQueue resource metrics only with enableClusterQueueResources, a
    field of its Configuration at the tag, which the chart's default config leaves commented out;
    the platform's manager config is the chart's with that field set, its webhooks kept to the
    tenants' namespaces and without the pod-based integrations (tests/test_first_up.py). LocalQueue
    metrics are on by default at the tag."""
    chart_values = yaml.safe_load(mirror_show(KUEUE_MIRROR, TAG, "charts/kueue/values.yaml"))
    chart_config = yaml.safe_load(chart_values["managerConfig"]["controllerManagerConfigYaml"])
    ours = yaml.safe_load(kueue_values(None, prometheus=True)["managerConfig"]["controllerManagerConfigYaml"])
    assert ours["metrics"].pop("enableClusterQueueResources") is True
    # The tenants' namespaces, by the label the tenancy component gives them.
    assert ours.pop("managedJobsNamespaceSelector") == {
        "matchExpressions": [{"key": "inference.platform/tenant", "operator": "Exists"}]
    }
    chart_frameworks = chart_config["integrations"]["frameworks"]
    assert ours["integrations"]["frameworks"] == [f for f in chart_frameworks if f not in KUEUE_UNUSED_POD_INTEGRATIONS]
    assert set(KUEUE_UNUSED_POD_INTEGRATIONS) <= set(chart_frameworks)
    ours["integrations"]["frameworks"] = chart_frameworks
    assert ours == chart_config
    assert "enableClusterQueueResources" not in chart_config["metrics"]
    types = mirror_show(KUEUE_MIRROR, TAG, "apis/config/v1beta2/configuration_types.go")
    assert 'EnableClusterQueueResources bool `json:"enableClusterQueueResources,omitempty"`' in types
    assert 'ManagedJobsNamespaceSelector *metav1.LabelSelector `json:"managedJobsNamespaceSelector,omitempty"`' in types
    defaults = mirror_show(KUEUE_MIRROR, TAG, "apis/config/v1beta2/defaults.go")
    assert "&LocalQueueMetrics{Enable: true}" in defaults
    # Without Prometheus nothing reads them.
    quiet = yaml.safe_load(kueue_values(None, prometheus=False)["managerConfig"]["controllerManagerConfigYaml"])
    assert quiet["metrics"] == chart_config["metrics"]


def test_every_job_has_its_queued_too_long_alert_paused_or_not() -> None:
    """Pausing a job changes its LocalQueue alone: the alert reads the queue's stopped state from Kueue's metrics."""
    config = validate(raw_stack("prod")).config
    assert any(j.paused for j in config.batch_jobs), "the prod stack has a paused job"
    queued = {r["labels"]["batch_job"] for r in rules(prod_rule()) if r.get("alert") == "BatchJobQueuedTooLong"}
    assert queued == {j.name for j in config.batch_jobs}


# --- under promtool -------------------------------------------------------------------------


def one_job(deadline: str) -> dict[str, Any]:
    """The prod stack with its running job's deadline set (and its paused one left as it is), its
    shards fast enough for it (the config check wants a shard's estimate within the deadline)."""
    raw = copy.deepcopy(raw_stack("prod"))
    [job] = [j for j in raw["batchJobs"] if j["name"] == "ticket-labels"]
    job["deadline"] = deadline
    job["tokensPerSecond"] = 8000
    return raw


def rules_file(tmp_path: Path, rule: dict[str, Any]) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    return path


SMALL_MIG, LARGE_MIG = f"{MIG_RESOURCE_PREFIX}1g.10gb", f"{MIG_RESOURCE_PREFIX}3g.40gb"
KSM = 'namespace="team-b", job_name="batch-ticket-labels", job="kube-state-metrics", instance="ksm:8080"'
KUEUE_TARGET = 'namespace="kueue-system", job="kueue-controller-manager-metrics-service"'
JOB_LABELS = {"tenant": "team-b", "batch_job": "ticket-labels", "severity": "ticket"}


@pytest.mark.real_server
def test_the_prod_rules_pass_promtool_check(promtool: str, tmp_path: Path) -> None:
    result = subprocess.run([promtool, "check", "rules", str(rules_file(tmp_path, prod_rule()))], capture_output=True, text=True)
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


@pytest.mark.real_server
def test_queue_records_read_the_leader_and_split_borrowed_gpus(promtool: str, tmp_path: Path) -> None:
    """team-b's leader reports 4 pending (active) and 2 admitted workloads and 5 GPUs in use of a
    nominal 2 on l4-batch (3 borrowed); the follower reports the same and is not counted twice;
    CPU usage is no GPU. On one MIG flavor it holds 5 1g.10gb slices of a nominal 2 and none of
    its 4 3g.40gb: 3 1g.10gb slices are borrowed, not offset by the spare 3g.40gb quota (nor
    added to them: a slice of one profile is not one of another)."""
    series = []
    for role in ("leader", "follower"):
        cq = f'{KUEUE_TARGET}, cluster_queue="team-b", replica_role="{role}", pod="kueue-{role}"'
        res = f'{cq}, cohort="batch", flavor="l4-batch"'
        series += [
            {"series": f'kueue_pending_workloads{{{cq}, status="active"}}', "values": "4x30"},
            {"series": f'kueue_pending_workloads{{{cq}, status="inadmissible"}}', "values": "0x30"},
            {"series": f"kueue_admitted_active_workloads{{{cq}}}", "values": "2x30"},
            {"series": f'kueue_cluster_queue_resource_usage{{{res}, resource="nvidia.com/gpu"}}', "values": "5x30"},
            {"series": f'kueue_cluster_queue_resource_usage{{{res}, resource="cpu"}}', "values": "40x30"},
            {"series": f'kueue_cluster_queue_nominal_quota{{{res}, resource="nvidia.com/gpu"}}', "values": "2x30"},
        ]
        mig = f'{cq}, cohort="batch", flavor="a100-mig"'
        for resource, used, nominal in ((SMALL_MIG, 5, 2), (LARGE_MIG, 0, 4)):
            series += [
                {"series": f'kueue_cluster_queue_resource_usage{{{mig}, resource="{resource}"}}', "values": f"{used}x30"},
                {"series": f'kueue_cluster_queue_nominal_quota{{{mig}, resource="{resource}"}}', "values": f"{nominal}x30"},
            ]
    team_b = {"tenant": "team-b"}
    gpu = {**team_b, "flavor": "l4-batch", "resource": "nvidia.com/gpu"}
    small = {**team_b, "flavor": "a100-mig", "resource": SMALL_MIG}
    large = {**team_b, "flavor": "a100-mig", "resource": LARGE_MIG}
    expect = [
        ("tenant:kueue_pending_workloads:sum", {**team_b, "status": "active"}, 4),
        ("tenant:kueue_pending_workloads:sum", {**team_b, "status": "inadmissible"}, 0),
        ("tenant:kueue_admitted_active_workloads:sum", team_b, 2),
        ("tenant_flavor_resource:kueue_gpu_usage:sum", gpu, 5),
        ("tenant_flavor_resource:kueue_gpu_nominal_quota:sum", gpu, 2),
        ("tenant_flavor_resource:kueue_gpu_borrowed:sum", gpu, 3),
        ("tenant_flavor_resource:kueue_gpu_usage:sum", small, 5),
        ("tenant_flavor_resource:kueue_gpu_nominal_quota:sum", small, 2),
        ("tenant_flavor_resource:kueue_gpu_borrowed:sum", small, 3),
        ("tenant_flavor_resource:kueue_gpu_usage:sum", large, 0),
        ("tenant_flavor_resource:kueue_gpu_nominal_quota:sum", large, 4),
        ("tenant_flavor_resource:kueue_gpu_borrowed:sum", large, 0),
    ]
    test = {
        "interval": "1m",
        "input_series": series,
        "promql_expr_test": [
            {
                "expr": f"{name}{prom_labels(labels)}",
                "eval_time": "10m",
                "exp_samples": [{"labels": prom_labels({"__name__": name, **labels}), "value": v}],
            }
            for name, labels, v in expect
        ],
    }
    passes(run_tests(promtool, tmp_path, rules_file(tmp_path, prod_rule()), [test]))


def queued(pending: str, inactive: bool = False, cluster_queue: str | None = "active") -> dict[str, Any]:
    """The job's LocalQueue as the leader reports it: its pending workloads and whether it is
    inactive (Active False: stopped, or its ClusterQueue missing or inactive); and team-b's
    ClusterQueue status (`pending`, `active`, `terminating`; None: no such ClusterQueue, no series)."""
    lq = f'{KUEUE_TARGET}, exported_namespace="team-b", name="batch-ticket-labels", replica_role="leader"'
    cq = f'{KUEUE_TARGET}, cluster_queue="team-b", replica_role="leader"'
    statuses = ("pending", "active", "terminating") if cluster_queue is not None else ()
    return {
        "interval": "1m",
        "input_series": [
            {"series": f'kueue_local_queue_pending_workloads{{{lq}, status="inadmissible"}}', "values": pending},
            {"series": f'kueue_local_queue_pending_workloads{{{lq}, status="active"}}', "values": "0x120"},
            {"series": f'kueue_local_queue_status{{{lq}, active="False"}}', "values": "1x120" if inactive else "0x120"},
            {"series": f'kueue_local_queue_status{{{lq}, active="True"}}', "values": "0x120" if inactive else "1x120"},
            *(
                {
                    "series": f'kueue_cluster_queue_status{{{cq}, status="{status}"}}',
                    "values": f"{int(status == cluster_queue)}x120",
                }
                for status in statuses
            ),
        ],
    }


@pytest.mark.real_server
def test_a_job_queued_beyond_its_deadline_opens_a_ticket(promtool: str, tmp_path: Path) -> None:
    """A 1 h job pending for 90 minutes: the ticket is open at 75 m; admitted after 30 minutes, no
    ticket."""
    path = rules_file(tmp_path, prod_rule(one_job("1h")))
    strip_annotations(path)
    waiting = queued("1x120")
    waiting["alert_rule_test"] = [
        {"eval_time": "75m", "alertname": "BatchJobQueuedTooLong", "exp_alerts": [{"exp_labels": JOB_LABELS}]}
    ]
    admitted = queued("1x30 0x90")
    admitted["alert_rule_test"] = [{"eval_time": "75m", "alertname": "BatchJobQueuedTooLong", "exp_alerts": []}]
    # Paused: its queue inactive while its ClusterQueue is active (reason Stopped), the same wait
    # opens no ticket.
    paused = queued("1x120", inactive=True)
    paused["alert_rule_test"] = [{"eval_time": "75m", "alertname": "BatchJobQueuedTooLong", "exp_alerts": []}]
    # Its queue inactive because the ClusterQueue is pending, terminating or missing
    # (ClusterQueueIsInactive, ClusterQueueDoesNotExist): the job is stuck, the ticket opens.
    stuck = []
    for cluster_queue in ("pending", "terminating", None):
        test = queued("1x120", inactive=True, cluster_queue=cluster_queue)
        test["alert_rule_test"] = [
            {"eval_time": "75m", "alertname": "BatchJobQueuedTooLong", "exp_alerts": [{"exp_labels": JOB_LABELS}]}
        ]
        stuck.append(test)
    passes(run_tests(promtool, tmp_path, path, [waiting, admitted, paused, *stuck]))
    # Before the deadline has passed the same wait is silent (the test can fail).
    waiting["alert_rule_test"][0]["eval_time"] = "50m"
    fails(run_tests(promtool, tmp_path, path, [waiting]))


def running(succeeded: int, failed_condition: str = "false") -> dict[str, Any]:
    """ticket-labels (12 shards) started at 0, two shards running, `succeeded` done."""
    return {
        "interval": "1m",
        "input_series": [
            {"series": f"kube_job_status_start_time{{{KSM}}}", "values": "0x60"},
            {"series": f"kube_job_spec_completions{{{KSM}}}", "values": "12x60"},
            {"series": f"kube_job_status_active{{{KSM}}}", "values": "2x60"},
            {"series": f"kube_job_status_succeeded{{{KSM}}}", "values": f"{succeeded}x60"},
            {"series": f'kube_job_failed{{{KSM}, condition="true"}}', "values": f"{int(failed_condition == 'true')}x60"},
            {"series": f'kube_job_failed{{{KSM}, condition="false"}}', "values": f"{int(failed_condition == 'false')}x60"},
        ],
    }


@pytest.mark.real_server
def test_a_job_behind_its_deadline_opens_a_ticket_and_one_on_pace_does_not(promtool: str, tmp_path: Path) -> None:
    """A 1 h job 50 minutes in: 2 of 12 shards done (17% for 83% of the deadline) is behind;
    11 of 12 (92%) is on pace. The alert's value is the share done."""
    path = rules_file(tmp_path, prod_rule(one_job("1h")))
    strip_annotations(path)
    behind = running(2)
    behind["alert_rule_test"] = [
        {
            "eval_time": "50m",
            "alertname": "BatchJobBehindDeadline",
            "exp_alerts": [{"exp_labels": {**JOB_LABELS, "namespace": "team-b", "job_name": "batch-ticket-labels"}}],
        }
    ]
    behind["promql_expr_test"] = [
        {
            "expr": "round(job:kube_job_shards_done:ratio, 0.001)",
            "eval_time": "50m",
            "exp_samples": [{"labels": prom_labels({"namespace": "team-b", "job_name": "batch-ticket-labels"}), "value": 0.167}],
        }
    ]
    on_pace = running(11)
    on_pace["alert_rule_test"] = [{"eval_time": "50m", "alertname": "BatchJobBehindDeadline", "exp_alerts": []}]
    passes(run_tests(promtool, tmp_path, path, [behind, on_pace]))
    # Within the first half of the deadline nothing is judged yet.
    behind["alert_rule_test"][0]["eval_time"] = "25m"
    fails(run_tests(promtool, tmp_path, path, [behind]))


@pytest.mark.real_server
def test_a_failed_job_opens_a_ticket(promtool: str, tmp_path: Path) -> None:
    path = rules_file(tmp_path, prod_rule())
    strip_annotations(path)
    failed = running(5, failed_condition="true")
    failed["alert_rule_test"] = [
        {
            "eval_time": "10m",
            "alertname": "BatchJobFailed",
            "exp_alerts": [{"exp_labels": {**JOB_LABELS, "namespace": "team-b", "job_name": "batch-ticket-labels"}}],
        }
    ]
    healthy = running(5)
    healthy["alert_rule_test"] = [{"eval_time": "10m", "alertname": "BatchJobFailed", "exp_alerts": []}]
    passes(run_tests(promtool, tmp_path, path, [failed, healthy]))


def evictions(reason: str, per_minute: float) -> dict[str, Any]:
    cq = f'{KUEUE_TARGET}, cluster_queue="team-b", replica_role="leader", underlying_cause="", priority_class="batch"'
    return {
        "interval": "1m",
        "input_series": [{"series": f'kueue_evicted_workloads_total{{{cq}, reason="{reason}"}}', "values": f"0+{per_minute}x90"}],
    }


@pytest.mark.real_server
def test_repeated_preemptions_open_a_ticket_and_pausing_does_not(promtool: str, tmp_path: Path) -> None:
    """One preemption every 10 minutes (6 an hour) is repeated; one every 30 minutes (2 an hour)
    is not, nor are 6 an hour evicted by a stopped (paused) LocalQueue."""
    assert REPEATED_PREEMPTIONS == 3
    path = rules_file(tmp_path, prod_rule())
    strip_annotations(path)
    labels = {"tenant": "team-b", "reason": "Preempted", "severity": "ticket"}
    tests = []
    for reason, rate, expected in (
        ("Preempted", 0.1, [{"exp_labels": labels}]),
        ("Preempted", 1 / 30, []),
        ("LocalQueueStopped", 0.1, []),
    ):
        test = evictions(reason, round(rate, 6))
        test["alert_rule_test"] = [{"eval_time": "80m", "alertname": "BatchQueuePreemptedRepeatedly", "exp_alerts": expected}]
        tests.append(test)
    passes(run_tests(promtool, tmp_path, path, tests))
