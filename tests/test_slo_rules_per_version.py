"""What each version's SLO rules read under the real `promtool`: GPU activity averaged over the version's own
pods, and the requests its endpoint picker refuses, which burn its availability budget."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from components.slo_plan import SloPlan

from .helpers import raw_stack, validate
from .promtool_rules import passes, prom_labels, run_tests, strip_annotations
from .slo_rules_helpers import AT, CHAT, MINUTES, PER_MINUTE, VERSION, availability_burn, request_series, rules_file


@pytest.mark.real_server
def test_gpu_activity_is_averaged_per_version_over_its_own_pods(promtool: str, tmp_path: Path) -> None:
    """DCGM knows pods, not versions: two v1 pods at 50% and 90% and one v2 pod at 20% give v1
    0.7 and v2 0.2; a pod of another model in the tenant's namespace, and a pod of the same name in
    another namespace, are not counted."""
    rules = rules_file(tmp_path, CHAT)
    model_label = "label_inference_platform_model"
    version_label = "label_inference_platform_model_version"

    def pod(name: str, namespace: str, model: str, version: str, activity: float) -> list[dict[str, str]]:
        return [
            {
                "series": f'kube_pod_labels{{namespace="{namespace}", pod="{name}", {model_label}="{model}", '
                f'{version_label}="{version}", job="kube-state-metrics"}}',
                "values": f"1x{MINUTES}",
            },
            {
                "series": f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{namespace="{namespace}", pod="{name}", gpu="0", '
                f'modelName="NVIDIA H100 80GB HBM3", Hostname="node-{name}"}}',
                "values": f"{activity}x{MINUTES}",
            },
        ]

    series = (
        pod("a", CHAT.tenant, CHAT.model, "v1", 0.5)
        + pod("b", CHAT.tenant, CHAT.model, "v1", 0.9)
        + pod("c", CHAT.tenant, CHAT.model, "v2", 0.2)
        + pod("d", CHAT.tenant, "other-model", "v1", 1.0)
        + pod("a", "team-b", CHAT.model, "v1", 0.0)
    )
    labels = {"model": CHAT.model, "tenant": CHAT.tenant}
    test = {
        "interval": "1m",
        "input_series": series,
        "promql_expr_test": [
            {
                "expr": "round(model_version:dcgm_gpu_engine_active:avg, 0.0001)",
                "eval_time": "10m",
                "exp_samples": [
                    {"labels": prom_labels({**labels, "model_version": "v1"}), "value": 0.7},
                    {"labels": prom_labels({**labels, "model_version": "v2"}), "value": 0.2},
                ],
            }
        ],
    }
    passes(run_tests(promtool, tmp_path, rules, [test]))


PICKED = SloPlan(
    model=CHAT.model,
    served_name=CHAT.served_name,
    tenant=CHAT.tenant,
    availability_objective=CHAT.availability_objective,
    latency=CHAT.latency,
    picker_workloads=(f"{CHAT.model}-{VERSION}-epp", f"{CHAT.model}-v2-epp"),
)
# What the sidecar of a version's picker pods reports (tests/canary_series.py has the same shape).
PICKER = (
    f'reporter="destination", destination_workload_namespace="{CHAT.tenant}", destination_app="{CHAT.model}-{VERSION}-epp", '
    f'destination_version="unknown", destination_workload="{CHAT.model}-{VERSION}-epp", tier="premium"'
)


def test_the_plan_names_each_versions_picker_where_it_has_one() -> None:
    plan = validate(raw_stack("prod"))
    by_name = {m.model.name: m.slo for m in plan.models}
    assert by_name["llama-70b"].picker_workloads == ("llama-70b-v1-epp",)
    assert by_name["llama-8b"].picker_workloads == ("llama-8b-v1-epp", "llama-8b-v2-epp")  # Knative-served, picked too
    staging = {m.model.name: m.slo for m in validate(raw_stack("staging")).models}
    assert staging["labeller"].picker_workloads == ()  # scales to zero: no picker


@pytest.mark.real_server
def test_requests_the_picker_path_refuses_burn_the_availability_budget(promtool: str, tmp_path: Path) -> None:
    """The servers answer every request they see; the picker refuses as many again (429 at its
    sidecar, 503 to the client): the version pages, and its recorded 503 share counts them."""
    rules = rules_file(tmp_path, PICKED)
    refused = PER_MINUTE
    # The picked requests' own answers pass the picker pods too: never counted twice.
    picker = [
        {"series": f'istio_requests_total{{{PICKER}, response_code="429"}}', "values": f"0+{refused}x{MINUTES}"},
        {"series": f'istio_requests_total{{{PICKER}, response_code="200"}}', "values": f"0+{PER_MINUTE}x{MINUTES}"},
    ]
    storm = {
        "interval": "1m",
        "input_series": request_series(0.0) + picker,
        "alert_rule_test": [availability_burn(PICKED)],
        "promql_expr_test": [
            {
                "expr": "model_version_tier:istio_requests_503:ratio_rate5m",
                "eval_time": AT,
                "exp_samples": [
                    {
                        "labels": 'model_version_tier:istio_requests_503:ratio_rate5m{model="chat-model", '
                        'model_version="v1", tenant="team-a", tier="premium"}',
                        "value": 0.5,
                    }
                ],
            }
        ],
    }
    # Without the picker's workload named, the same hour looks healthy: the servers saw no error.
    unseen: dict[str, Any] = {
        "interval": "1m",
        "input_series": request_series(0.0) + picker,
        "alert_rule_test": [availability_burn(None)],
    }
    strip_annotations(rules)
    passes(run_tests(promtool, tmp_path, rules, [storm]))
    plain = rules_file(tmp_path, CHAT)
    strip_annotations(plain)
    passes(run_tests(promtool, tmp_path, plain, [unseen]))
