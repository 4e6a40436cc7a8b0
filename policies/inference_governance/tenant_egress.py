"""Tenant egress by host: a tenant's workloads keep the mesh's sidecar, under REGISTRY_ONLY over their namespace's
own ServiceEntries (S3 and Hugging Face, TLS on 443) and the egress gateway, its endpoint pickers reach only private
addresses, and in production its pods read nothing from Hugging Face themselves (the weight mirror's copies instead)
and its hosts go through the egress gateway (egress_gateway.py)."""

from __future__ import annotations

import ipaddress
import re
from collections import defaultdict
from typing import Any, Collection, Iterator, Mapping

from .egress_gateway import EGRESS, egress_through_gateway
from .kube import (
    COMPONENT_LABEL,
    DEPLOYMENT,
    ENDPOINT_PICKER,
    FACTS,
    ISTIO_SIDECAR,
    NAMESPACE,
    SERVICE_ENTRY,
    SIDECAR_NAME,
    Report,
    containers,
    get,
    image_repository,
    is_list,
    is_production,
    is_sidecar_stub,
    labels_match,
    model_servers,
    name_of,
    namespace_of,
    opts_out_of_injection_or_host_network,
    pod_makers,
    pod_template,
    selector_matches,
    whole_number,
)
from .label_index import SelectorIndex
from .s3_locations import s3_parts
from .tenant_data import declared_prefixes, mirror_bucket, role_policies
from .workloads import of_type, tenant_namespaces

# What a ServiceEntry of a tenant's may name: S3's endpoints (a bucket's virtual host, or the
# path-style host) and, outside production, Hugging Face's hosts.
S3_HOSTS = re.compile(r"([a-z0-9][a-z0-9.-]{1,62}\.)?s3(\.[a-z]{2}(-[a-z]+)+-[0-9])?\.amazonaws\.com")
HUGGING_FACE_HOSTS = re.compile(r"(\*\.)?(huggingface\.co|hf\.co)")
EGRESS_HOSTS = (S3_HOSTS, HUGGING_FACE_HOSTS)


# A bucket's virtual host on S3's regional or global endpoint.
S3_VIRTUAL_HOST = re.compile(r"([a-z0-9][a-z0-9.-]{1,62})\.s3(?:\.[a-z]{2}(?:-[a-z]+)+-[0-9])?\.amazonaws\.com")


# Resolved by the sidecar itself, so it connects where the matched host resolves, not where the
# caller pointed it (resolution NONE, STATIC with endpoints or addresses would).
SIDECAR_RESOLUTIONS = ("DNS", "DYNAMIC_DNS")


# The EKS Pod Identity Agent's addresses: a server reading S3 under REGISTRY_ONLY sends its
# credentials call around the sidecar, which no Service names (components/specs/network.py); a test holds
# them to the program's.
POD_IDENTITY_AGENT = ("169.254.170.23/32", "fd00:ec2::23/128")


EXCLUDE_OUTBOUND_ANNOTATION = "traffic.sidecar.istio.io/excludeOutboundIPRanges"


# The init container that downloads Hugging Face adapters: `python3 -c <script>` and (repository, revision, path)
# triples (components/specs/vllm_parts.py adapter_fetch_containers).
ADAPTER_FETCHER = "fetch-adapters"


# The batch runner's environment variable naming a Hugging Face dataset input (components/specs/batch_job.py).
BATCH_INPUT_HF_REPO = "BATCH_INPUT_HF_REPO"


# Pod annotations that take traffic away from the sidecar (istio 1.30.3 files/injection-template.yaml).
CAPTURE_ANNOTATIONS = (
    "traffic.sidecar.istio.io/includeOutboundIPRanges",
    "traffic.sidecar.istio.io/excludeOutboundPorts",
    "traffic.sidecar.istio.io/includeOutboundPorts",
    "sidecar.istio.io/interceptionMode",
)


# Where an endpoint picker may connect by address (components/specs/network.py PRIVATE_CIDRS and the Pod Identity Agent).
PICKER_EGRESS_CIDRS = tuple(FACTS["pickerEgressCidrs"])


NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"


# The images an endpoint picker's pods run (the program's pins, platform_facts.json).
PICKER_REPOSITORIES = frozenset(FACTS["images"]["endpointPickerRepositories"])


# The namespace label that asks Istio's injector for every pod of the namespace (istio 1.30.3
# mutatingwebhook.yaml namespace.sidecar-injector.istio.io); the program labels tenant namespaces with it.
NAMESPACE_INJECTION_LABEL = "istio-injection"


# istio-iptables lets the proxy's own user and group out unredirected (`-u 1337`, the template's `-g`).
PROXY_ID = 1337


# What a tenant's sidecars may see beyond their namespace: the egress gateway's Service (namespace/host).
EGRESS_GATEWAY_SIDECAR_HOST: str = EGRESS["sidecarHost"]


def _strings(value: Any) -> Iterator[str]:
    """Every string in a value as the analyzer hands it over (its read-only mapping and list proxies)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif is_list(value):
        for item in value:
            yield from _strings(item)


def _pod_containers(template: Mapping[str, Any]) -> list[Any]:
    """Every container of a pod template, init containers included (istio-proxy runs before them as a
    native sidecar on 1.33 nodes, so they too are held to its policy)."""
    return list(containers(get(template, "spec", default={}) or {}))


def _hugging_face_reads(container: Mapping[str, Any]) -> list[str]:
    """What a container downloads from Hugging Face: the model `vllm serve` (the servers) or `--model` (the batch
    runner's `vllm run-batch`) names when it is not an S3 or local path, a batch job's input dataset, and the
    adapters the adapter fetcher downloads."""
    words = [str(w) for w in [*(get(container, "command", default=[]) or []), *(get(container, "args", default=[]) or [])]]
    models = []
    if get(container, "name") == "vllm":
        models.append(words[words.index("serve") + 1] if "serve" in words[:-1] else (words[0] if words else ""))
    models += [words[i + 1] for i, word in enumerate(words[:-1]) if word == "--model"]
    if get(container, "name") == ADAPTER_FETCHER and words[:2] == ["python3", "-c"]:
        models += words[3::3]  # its (repository, revision, path) triples
    models += [str(get(e, "value")) for e in get(container, "env", default=[]) or [] if get(e, "name") == BATCH_INPUT_HF_REPO]
    return [model for model in models if model and not model.startswith(("s3://", "/", "-"))]


def _unreachable(template: Mapping[str, Any], hosts: set[str]) -> list[str]:
    """What a workload's containers read that its namespace's ServiceEntries do not name: each S3 bucket (by
    either virtual-hosted name), Hugging Face for a model or dataset that is not an S3 or local path, and the Pod
    Identity Agent where it reads S3."""
    missing = []
    buckets = sorted(set(re.findall(r"s3://([a-z0-9][a-z0-9.-]*)/", "\n".join(_strings(_pod_containers(template))))))
    for bucket in buckets:
        if not any(host.startswith(f"{bucket}.s3.") for host in hosts):
            missing.append(f"s3://{bucket}")
    for container in _pod_containers(template):
        for model in _hugging_face_reads(container):
            if "huggingface.co" not in hosts:
                missing.append(f"Hugging Face ({model})")
    excluded = str(get(template, "metadata", "annotations", EXCLUDE_OUTBOUND_ANNOTATION, default="")).split(",")
    if buckets and POD_IDENTITY_AGENT[0] not in excluded:
        missing.append(f"the Pod Identity Agent ({EXCLUDE_OUTBOUND_ANNOTATION} lacks {POD_IDENTITY_AGENT[0]})")
    return missing


def _around_the_sidecar(template: Mapping[str, Any]) -> list[str]:
    """What lets a model server's traffic past its sidecar: capture annotations, exclusions beyond the Pod
    Identity Agent, a container running as the proxy's user or group, or one merged into the sidecar that states
    more than its size (kube.is_sidecar_stub)."""
    annotations = get(template, "metadata", "annotations", default={}) or {}
    found = [f"{key}: {annotations[key]}" for key in CAPTURE_ANNOTATIONS if key in annotations and annotations[key] != "*"]
    excluded = [r.strip() for r in str(annotations.get(EXCLUDE_OUTBOUND_ANNOTATION, "")).split(",") if r.strip()]
    found += [f"{EXCLUDE_OUTBOUND_ANNOTATION} {r}" for r in excluded if r not in POD_IDENTITY_AGENT]
    pod = get(template, "spec", "securityContext", default={}) or {}
    for container in _pod_containers(template):
        if get(container, "name") == SIDECAR_NAME and not is_sidecar_stub(container):
            found.append(f"container {SIDECAR_NAME} overrides the injected sidecar beyond its size")
            continue
        context = get(container, "securityContext", default={}) or {}
        for key in ("runAsUser", "runAsGroup"):
            if get(context, key, default=get(pod, key)) == PROXY_ID:
                found.append(f"container {get(container, 'name')} {key} {PROXY_ID}")
    return found


def _egress_of(sidecars: list[Any], labels: Mapping[str, str]) -> tuple[str, list[str]]:
    """The outbound traffic policy and egress hosts of a pod with these labels (istio 1.30.3
    pilot/pkg/model/sidecar.go: the Sidecars whose workloadSelector selects it, else the namespace's
    without one; ALLOW_ANY and every namespace, the mesh's default, without either). Several that
    disagree are reported as such."""
    selected = [s for s in sidecars if get(s.props, "spec", "workloadSelector", "labels")]
    chosen = [s for s in selected if labels_match(get(s.props, "spec", "workloadSelector", "labels"), labels)]
    chosen = chosen or [s for s in sidecars if not get(s.props, "spec", "workloadSelector", "labels")]
    modes = {str(get(s.props, "spec", "outboundTrafficPolicy", "mode", default="ALLOW_ANY")) for s in chosen}
    mode = modes.pop() if len(modes) == 1 else ("several" if modes else "ALLOW_ANY")
    hosts = [
        str(host)
        for s in chosen
        for listener in (get(s.props, "spec", "egress", default=None) or [{"hosts": ["*/*"]}])
        for host in (get(listener, "hosts", default=[]) or [])
    ]
    return mode, hosts or ["*/*"]


def tenant_egress_by_host(args: Any, report_violation: Report) -> None:
    """A tenant's workloads connect outside the cluster only to the hosts its namespace's ServiceEntries name: the
    namespace asks for the mesh's sidecar, their pods keep it, nothing taking their traffic around it; its outbound
    traffic policy there is REGISTRY_ONLY over the namespace's own registry (egress hosts `./*`) and the egress
    gateway's Service; those ServiceEntries are the namespace's alone, TLS on 443 resolved by the sidecar, naming S3
    endpoints and Hugging Face only, and every one a workload reads (or REGISTRY_ONLY would cut it off from its
    weights). Its endpoint pickers instead reach by address only private ones (_check_picker_egress). In production,
    its pods download nothing from Hugging Face themselves and its ServiceEntries name S3 only (the weight mirror, in the
    platform's own namespace, copies what they read from there), its hosts go through the egress gateway and its pods
    reach nothing public past it (egress_gateway.py)."""
    tenants = tenant_namespaces(args)
    production = is_production(args)
    sidecars: dict[str, list[Any]] = defaultdict(list)
    for sidecar in of_type(args, ISTIO_SIDECAR):
        sidecars[namespace_of(sidecar.props)].append(sidecar)
    named: dict[str, set[str]] = defaultdict(set)
    for entry in of_type(args, SERVICE_ENTRY):
        hosts = get(entry.props, "spec", "hosts", default=[]) or []
        named[namespace_of(entry.props)] |= {str(h) for h in (hosts if is_list(hosts) else [hosts])}
    for ns in of_type(args, NAMESPACE):
        labels = get(ns.props, "metadata", "labels", default={}) or {}
        if name_of(ns.props) in tenants and labels.get(NAMESPACE_INJECTION_LABEL) != "enabled":
            report_violation(
                f"tenant namespace {name_of(ns.props)} is not labelled {NAMESPACE_INJECTION_LABEL}=enabled: its pods may "
                "run without the mesh's sidecar, so nothing limits where they connect",
                ns.urn,
            )
    # Indexed, so each picker checks only the policies that may select its pods (many models share a namespace).
    network_policies = SelectorIndex(
        ((namespace_of(policy.props), policy) for policy in of_type(args, NETWORK_POLICY)),
        lambda policy: get(policy.props, "spec", "podSelector", "matchLabels", default={}),
    )
    for resource, namespace, labels, what in _tenant_workloads(args, tenants):
        if what is None:
            _check_picker_egress(resource, labels, network_policies.candidates(namespace, labels), report_violation)
        else:
            _check_server_egress(resource, namespace, what, (sidecars[namespace], named[namespace]), production, report_violation)
    # A tenant's own data (its declared prefixes') and the weight mirror's copies: the buckets its servers read.
    mirror = mirror_bucket(role_policies(args), lambda *_: None)
    declared = declared_prefixes(args, lambda *_: None)  # a prefix's own faults are tenant-s3-scoping's
    for entry in of_type(args, SERVICE_ENTRY):
        namespace = namespace_of(entry.props)
        if namespace in tenants:
            own = {s3_parts(prefix)[0] for prefix in declared.get(namespace, [])} | ({mirror} if mirror else set())
            _check_service_entry(entry, own, production, report_violation)
    if production:
        egress_through_gateway(args, tenants, named, report_violation)


def _tenant_workloads(args: Any, tenants: Collection[str]) -> Iterator[tuple[Any, str, Mapping[str, str], str | None]]:
    """(resource, namespace, its pods' labels, what it is) of every workload in a tenant's namespace: its model
    servers, its batch jobs and anything else a change puts there; None for what it is of an endpoint picker, which
    keeps ALLOW_ANY (it reads its servers by pod address, which REGISTRY_ONLY would drop) and which the namespace's
    NetworkPolicies must hold to private addresses instead."""
    servers = {id(resource): model for resource, (_, model) in model_servers(args)}
    for resource in pod_makers(args):
        template = pod_template(resource.resource_type, resource.props)
        namespace = namespace_of(resource.props)
        if template is None or namespace not in tenants:
            continue
        labels = get(template, "metadata", "labels", default={}) or {}
        if id(resource) in servers:
            yield resource, namespace, labels, f"model {servers[id(resource)]}"
        elif _is_endpoint_picker(resource, template, labels):
            yield resource, namespace, labels, None
        else:
            yield resource, namespace, labels, resource.resource_type.rsplit(":", 1)[-1]


def _check_picker_egress(resource: Any, labels: Mapping[str, str], policies: list[Any], report_violation: Report) -> None:
    """An endpoint picker, exempt from REGISTRY_ONLY, reaches by address only the private ranges and the Pod Identity
    Agent: every egress NetworkPolicy of its namespace that selects its pods (of `policies`, those that may: they add
    up, so one is enough to let it out) names in-cluster peers by selector, or address blocks within
    PICKER_EGRESS_CIDRS."""
    namespace = namespace_of(resource.props)
    for policy in policies:
        spec = get(policy.props, "spec", default={}) or {}
        if "Egress" not in [str(t) for t in get(spec, "policyTypes", default=[]) or []]:
            continue
        if not selector_matches(get(spec, "podSelector", default={}), labels):
            continue
        for rule in get(spec, "egress", default=[]) or []:
            peers = get(rule, "to", default=None)
            if not peers:
                report_violation(
                    f"NetworkPolicy {namespace}/{name_of(policy.props)} lets endpoint picker {name_of(resource.props)} "
                    "connect anywhere (an egress rule without `to`)",
                    policy.urn,
                )
            for peer in peers or []:
                block = get(peer, "ipBlock", default=None)
                if block is not None and not _within(str(get(block, "cidr", default="")), PICKER_EGRESS_CIDRS):
                    report_violation(
                        f"NetworkPolicy {namespace}/{name_of(policy.props)} lets endpoint picker {name_of(resource.props)} "
                        f"reach {get(block, 'cidr')}: its pods keep ALLOW_ANY, so by address they reach only "
                        f"{', '.join(PICKER_EGRESS_CIDRS)}",
                        policy.urn,
                    )


def _within(cidr: str, allowed: Collection[str]) -> bool:
    try:
        network = ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return False
    return any(
        network.version == outer.version and network.subnet_of(outer)  # type: ignore[arg-type]
        for outer in (ipaddress.ip_network(a) for a in allowed)
    )


def _is_endpoint_picker(resource: Any, template: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """An endpoint picker by its label, and only if it is a Deployment whose containers run the picker's own images
    (the EPP, its Envoy, the sidecar's stub): a label alone would let any pod out of the egress rule."""
    if labels.get(COMPONENT_LABEL) != ENDPOINT_PICKER or resource.resource_type != DEPLOYMENT:
        return False
    return all(
        is_sidecar_stub(c) or image_repository(str(get(c, "image", default=""))) in PICKER_REPOSITORIES
        for c in _pod_containers(template)
    )


def _check_server_egress(
    resource: Any,
    namespace: str,
    what: str,
    registry: tuple[list[Any], set[str]],
    production: bool,
    report_violation: Report,
) -> None:
    """A workload of a tenant's (`what` it is) under its namespace's Sidecars and ServiceEntries' hosts (`registry`);
    in production it downloads nothing from Hugging Face itself."""
    sidecars, hosts = registry
    template = pod_template(resource.resource_type, resource.props) or {}
    labels = get(template, "metadata", "labels", default={}) or {}
    where = f"{name_of(resource.props)} in {namespace} ({what})"
    downloads = [model for container in _pod_containers(template) for model in _hugging_face_reads(container)]
    if production and downloads:
        report_violation(
            f"{where} downloads {', '.join(sorted(set(downloads)))} from Hugging Face itself: in production a tenant's "
            "pods read the weight mirror's copies in S3 (weightMirror), so that no tenant's namespace reaches "
            "Hugging Face's CDN, which no egress gateway can forward",
            resource.urn,
        )
    if opts_out_of_injection_or_host_network(template):
        report_violation(f"{where} opts out of the mesh's sidecar: nothing limits where it connects", resource.urn)
        return
    bypasses = _around_the_sidecar(template)
    if bypasses:
        report_violation(f"{where}: its traffic goes around the sidecar ({'; '.join(bypasses)})", resource.urn)
    mode, egress = _egress_of(sidecars, labels)
    if mode != "REGISTRY_ONLY":
        report_violation(
            f"{where}: its sidecar's outbound traffic policy is {mode}, so it may connect anywhere HTTPS reaches; "
            "declare a Sidecar selecting it with outboundTrafficPolicy.mode REGISTRY_ONLY",
            resource.urn,
        )
        return
    others = [host for host in egress if not host.startswith("./") and host != EGRESS_GATEWAY_SIDECAR_HOST]
    if others:
        report_violation(
            f"{where}: its sidecar sees {', '.join(others)}, so a ServiceEntry another namespace exports would let it "
            f"out; keep its egress hosts to ./* and {EGRESS_GATEWAY_SIDECAR_HOST}",
            resource.urn,
        )
    missing = _unreachable(template, hosts)
    if missing:
        report_violation(
            f"{where} reads {', '.join(missing)}, which no ServiceEntry of its namespace names: REGISTRY_ONLY would cut it off",
            resource.urn,
        )


def _check_service_entry(entry: Any, buckets: set[str], production: bool, report_violation: Report) -> None:
    spec = get(entry.props, "spec", default={}) or {}
    where = f"ServiceEntry {namespace_of(entry.props)}/{name_of(entry.props)}"
    exported = get(spec, "exportTo")
    if not is_list(exported) or [str(to) for to in exported] != ["."]:
        report_violation(f'{where} is exported beyond its namespace: set exportTo to ["."]', entry.urn)
    ports = [
        (whole_number(get(p, "number")), str(get(p, "protocol", default=""))) for p in (get(spec, "ports", default=[]) or [])
    ]
    if ports != [(443, "TLS")]:
        report_violation(f"{where} declares ports {ports}: a tenant's servers reach outside only TLS on 443", entry.urn)
    if str(get(spec, "resolution", default="NONE")) not in SIDECAR_RESOLUTIONS:
        report_violation(
            f"{where} has resolution {get(spec, 'resolution', default='NONE')}: the sidecar would connect where the "
            f"caller points it; use {' or '.join(SIDECAR_RESOLUTIONS)}",
            entry.urn,
        )
    for key in ("addresses", "endpoints", "workloadSelector"):
        if get(spec, key):
            report_violation(f"{where} sets {key}: a tenant's ServiceEntries name hosts only", entry.urn)
    if str(get(spec, "location", default="")) != "MESH_EXTERNAL":
        report_violation(f"{where} is not MESH_EXTERNAL", entry.urn)
    hosts = get(spec, "hosts", default=[]) or []
    for host in hosts if is_list(hosts) else [hosts]:
        if not any(pattern.fullmatch(str(host)) for pattern in EGRESS_HOSTS):
            report_violation(f"{where} names {host!r}: a tenant's servers reach only S3 endpoints and Hugging Face", entry.urn)
        elif production and HUGGING_FACE_HOSTS.fullmatch(str(host)):
            report_violation(
                f"{where} names {host!r}: in production a tenant's pods read Hugging Face revisions from the weight "
                "mirror's copies in S3, and only the mirror's Jobs reach Hugging Face",
                entry.urn,
            )
        bucket = S3_VIRTUAL_HOST.fullmatch(str(host))
        if bucket is not None and bucket.group(1) not in buckets:
            report_violation(
                f"{where} names bucket {bucket.group(1)!r}, which is neither under the tenant's S3 prefixes nor the weight "
                "mirror's",
                entry.urn,
            )
