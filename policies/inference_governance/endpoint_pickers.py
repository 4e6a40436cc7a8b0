"""Endpoint pickers: in production every model server is picked by one (whose replicas, spread and budget
control-plane-availability holds); every InferencePool names a picker's Service; pickers stay in the mesh and tenants
accept no plaintext."""

from __future__ import annotations

from typing import Any

from .kube import (
    COMPONENT_LABEL,
    DEPLOYMENT,
    ENDPOINT_PICKER,
    INFERENCE_POOL,
    INJECT_ASKED,
    KNATIVE_SERVICE,
    MODEL_LABEL,
    PEER_AUTHENTICATION,
    SERVICE,
    SIDECAR_INJECT,
    Report,
    get,
    is_production,
    labels_match,
    name_of,
    namespace_of,
    pod_labels,
    selector_matches,
)
from .label_index import LabelIndex, SelectorIndex
from .workloads import of_type, tenant_namespaces

# PeerAuthentication modes that accept plaintext (istio security/v1beta1 MutualTLS.Mode).
PLAINTEXT_MODES = {"PERMISSIVE", "DISABLE"}


class EndpointPicker:
    """An endpoint picker Deployment: the program labels it and its pods with the component."""

    def __init__(self, resource: Any):
        template = get(resource.props, "spec", "template", default={})
        self.resource = resource
        self.namespace = namespace_of(resource.props)
        self.name = name_of(resource.props)
        self.pod_labels = dict(get(template, "metadata", "labels", default={}))
        self.pod_annotations = dict(get(template, "metadata", "annotations", default={}))

    @property
    def label(self) -> str:
        return f"endpoint picker {self.namespace}/{self.name}"


def endpoint_pickers(args: Any) -> list[EndpointPicker]:
    return [
        EndpointPicker(d)
        for d in of_type(args, DEPLOYMENT)
        if ENDPOINT_PICKER
        in (
            get(d.props, "metadata", "labels", COMPONENT_LABEL),
            get(d.props, "spec", "template", "metadata", "labels", COMPONENT_LABEL),
        )
    ]


def _pools_name_endpoint_pickers(args: Any, pickers: list[EndpointPicker], report_violation: Report) -> None:
    """An InferencePool's endpointPickerRef (group "" and kind Service by default, GAIE
    inference.networking.k8s.io/v1 EndpointPickerRef) is a Service of its namespace that selects
    the pods of an endpoint picker."""
    services = {(namespace_of(s.props), name_of(s.props)): s for s in of_type(args, SERVICE)}
    by_labels = LabelIndex(pickers, lambda p: p.namespace, lambda p: p.pod_labels)
    for pool in of_type(args, INFERENCE_POOL):
        namespace = namespace_of(pool.props)
        where = f"InferencePool {namespace}/{name_of(pool.props)}"
        ref = get(pool.props, "spec", "endpointPickerRef", default={})
        group, kind, name = get(ref, "group", default=""), get(ref, "kind", default="Service"), get(ref, "name")
        if group != "" or kind != "Service":
            report_violation(
                f"{where}: spec.endpointPickerRef is a {kind} of group '{group}', not a Service: name the endpoint picker's "
                "Service (kind Service, group '')",
                pool.urn,
            )
        elif not name:
            report_violation(f"{where} names no endpoint picker: set spec.endpointPickerRef.name to the EPP's Service", pool.urn)
        elif (namespace, name) not in services:
            report_violation(
                f"{where}: spec.endpointPickerRef names Service {namespace}/{name}, which the stack does not declare: declare "
                "the endpoint picker's Service in the pool's namespace, or name it",
                pool.urn,
            )
        else:
            selector = get(services[(namespace, name)].props, "spec", "selector", default={})
            if not any(labels_match(selector, p.pod_labels) for p in by_labels.candidates(namespace, selector)):
                report_violation(
                    f"{where}: its endpoint picker Service {namespace}/{name} (selector {dict(selector)}) selects no pod of "
                    f"an endpoint picker Deployment: select the pods of the Deployment labelled {COMPONENT_LABEL}: "
                    f"{ENDPOINT_PICKER}",
                    pool.urn,
                )


def _endpoint_pickers_in_the_mesh(args: Any, pickers: list[EndpointPicker], report_violation: Report) -> None:
    """mTLS is promised on every hop, gateway -> picker -> model server: the pickers keep their
    sidecar, and no PeerAuthentication of a tenant namespace accepts plaintext."""
    for picker in pickers:
        where = "label" if SIDECAR_INJECT in picker.pod_labels else "annotation"
        value = picker.pod_labels.get(SIDECAR_INJECT, picker.pod_annotations.get(SIDECAR_INJECT, ""))
        if value != "" and str(value).lower() not in INJECT_ASKED:
            report_violation(
                f"{picker.label} opts its pods out of the mesh ({where} {SIDECAR_INJECT}: {value!r}): without the sidecar the "
                "gateway -> picker and picker -> server hops lose mTLS; remove it from the pod template",
                picker.resource.urn,
            )
    tenants = (
        tenant_namespaces(args)
        | {p.namespace for p in pickers}
        | {namespace_of(pool.props) for pool in of_type(args, INFERENCE_POOL)}
    )
    for peer in of_type(args, PEER_AUTHENTICATION):
        namespace = namespace_of(peer.props)
        if namespace not in tenants:
            continue
        spec = get(peer.props, "spec", default={})
        scope = "for the workloads it selects" if get(spec, "selector") else "for the whole namespace"
        weak = []
        mode = str(get(spec, "mtls", "mode", default="")).upper()
        if mode in PLAINTEXT_MODES:
            weak.append(f"mTLS mode {mode} {scope}")
        for port, setting in get(spec, "portLevelMtls", default={}).items():
            port_mode = str(get(setting, "mode", default="")).upper()
            if port_mode in PLAINTEXT_MODES:
                weak.append(f"mTLS mode {port_mode} on port {port}")
        if weak:
            report_violation(
                f"PeerAuthentication {namespace}/{name_of(peer.props)} in tenant namespace {namespace} sets "
                f"{', '.join(weak)}: mTLS is promised on every hop; set STRICT (or UNSET, to inherit the namespace's)",
                peer.urn,
            )


def _production_servers_behind_pickers(args: Any, report_violation: Report) -> None:
    """In production a model's pods, Deployment- or Knative-served, are picked by an endpoint
    picker: only the picker's queue is bounded in time per tier (the gateway's pending queue,
    vLLM's scheduler, queue-proxy and Knative's activator have no timer below the route's
    timeout: knative/serving knative-v1.23.0 cmd/activator/main.go), so each server's pods are
    selected by an InferencePool of their namespace."""
    pools = SelectorIndex(
        ((namespace_of(pool.props), get(pool.props, "spec", "selector")) for pool in of_type(args, INFERENCE_POOL)),
        lambda selector: get(selector, "matchLabels", default={}),
    )
    for kind, server in [(DEPLOYMENT, r) for r in of_type(args, DEPLOYMENT)] + [
        (KNATIVE_SERVICE, r) for r in of_type(args, KNATIVE_SERVICE)
    ]:
        labels = pod_labels(kind, server.props)
        model = labels.get(MODEL_LABEL)
        if model is None:
            continue
        namespace = namespace_of(server.props)
        if not any(selector_matches(selector, labels) for selector in pools.candidates(namespace, labels)):
            what = "Deployment" if kind == DEPLOYMENT else "Knative Service"
            report_violation(
                f"{what} {namespace}/{name_of(server.props)} serves model {model!r} with no InferencePool selecting "
                "its pods: in production every request's wait is bounded in time, which only the endpoint picker's "
                "queue does; keep the model's endpoint picker (endpointPicker.enabled)",
                server.urn,
            )


def endpoint_picker_availability(args: Any, report_violation: Report) -> None:
    pickers = endpoint_pickers(args)
    if is_production(args):
        # Their replicas, spread and budgets: control-plane-availability (control_plane.py).
        _production_servers_behind_pickers(args, report_violation)
    _pools_name_endpoint_pickers(args, pickers, report_violation)
    _endpoint_pickers_in_the_mesh(args, pickers, report_violation)
