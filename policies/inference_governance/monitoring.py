"""Monitoring (advisory): model servers are scraped by a ServiceMonitor or PodMonitor."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Mapping

from .kube import BATCH_JOB, POD_MONITOR, SERVICE_MONITOR, Report, get, labels_match, namespace_of
from .workloads import gpu_workloads, of_type


def model_server_monitoring(args: Any, report_violation: Report) -> None:
    # Pod selectors, by namespace, of everything that scrapes pods.
    scraped: dict[str, list[Mapping[str, str]]] = defaultdict(list)
    services: dict[str, list[tuple[Mapping[str, str], Mapping[str, str]]]] = defaultdict(list)
    for service in of_type(args, "kubernetes:core/v1:Service"):
        services[namespace_of(service.props)].append(
            (get(service.props, "metadata", "labels", default={}), get(service.props, "spec", "selector", default={}))
        )
    for monitor in of_type(args, SERVICE_MONITOR):
        namespace = namespace_of(monitor.props)
        selector = get(monitor.props, "spec", "selector", "matchLabels", default={})
        scraped[namespace] += [pods for labels, pods in services[namespace] if labels_match(selector, labels)]
    for monitor in of_type(args, POD_MONITOR):
        scraped[namespace_of(monitor.props)].append(get(monitor.props, "spec", "selector", "matchLabels", default={}))
    for workload in gpu_workloads(args):
        # A Job (an offline batch job) runs to completion and serves nothing to scrape.
        if workload.resource.resource_type == BATCH_JOB:
            continue
        if not any(labels_match(selector, workload.pod_labels) for selector in scraped[workload.namespace]):
            report_violation(
                f"{workload.namespace}/{workload.name} serves a model but nothing scrapes its metrics (no ServiceMonitor or "
                "PodMonitor)",
                workload.resource.urn,
            )
