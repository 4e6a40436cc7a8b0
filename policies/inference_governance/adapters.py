"""LoRA adapter validators: what the model servers' pods declare they load (the program's
`inference.platform/lora-adapters` pod annotation, per adapter its owning tenant, the OpenAI name
of the model that declares it and its modules).
Each rule has the name of the config check that holds stacks to it before anything renders
(platform_config/checks/adapters.py)."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any, Mapping

from .kube import FACTS, Report, get, model_servers, name_of, namespace_of, pod_template

ADAPTERS_ANNOTATION: str = FACTS["annotations"]["loraAdapters"]
SERVED_NAME_FLAG = "--served-model-name"


def declared_adapters(resource_type: str, props: Mapping[str, Any]) -> dict[str, Any] | None:
    """The adapters a workload's pods declare (by OpenAI name: {tenant, modules}); None when it declares none, {} when
    the annotation is not a JSON object of objects."""
    template = pod_template(resource_type, props)
    raw = get(template, "metadata", "annotations", ADAPTERS_ANNOTATION) if template is not None else None
    if raw is None:
        return None
    try:
        adapters = json.loads(raw)
    except (TypeError, ValueError):
        return {}
    if not isinstance(adapters, dict) or not all(isinstance(v, dict) for v in adapters.values()):
        return {}
    return adapters


def served_names(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """The names a workload's vLLM containers answer to (`--served-model-name` and what follows it)."""
    template = pod_template(resource_type, props)
    names: list[str] = []
    for container in get(template, "spec", "containers", default=[]) if template is not None else []:
        args = [str(a) for a in get(container, "args", default=[]) or []]
        if SERVED_NAME_FLAG in args:
            start = args.index(SERVED_NAME_FLAG) + 1
            names += args[start : start + _run_length(args[start:])]
    return names


def _run_length(args: list[str]) -> int:
    return next((i for i, a in enumerate(args) if a.startswith("--")), len(args))


def adapter_names_unique(args: Any, report_violation: Report) -> None:
    """An adapter's OpenAI name names one thing cluster-wide: the adapters of one base model (its versions load the
    same ones, and so do its batch model's servers, which answer to the base's name as well and declare it as the
    adapter's `base`), never another model's adapter, nor a name a server answers to as a model."""
    owners: dict[str, set[tuple[str, str]]] = defaultdict(set)
    models: dict[str, set[tuple[str, str]]] = defaultdict(set)
    carriers: dict[str, list[Any]] = defaultdict(list)
    for resource, model in model_servers(args):
        answers_to = served_names(resource.resource_type, resource.props)
        for name in answers_to:
            models[name].add(model)
        for name, adapter in (declared_adapters(resource.resource_type, resource.props) or {}).items():
            # Servers that answer to the adapter's base name hold the base's adapters; any other holder is another base.
            base = adapter.get("base")
            owners[name].add((model[0], base) if isinstance(base, str) and base in answers_to else model)
            carriers[name].append(resource)
    for name, held_by in sorted(owners.items()):
        clashes = []
        if len(held_by) > 1:
            clashes.append("an adapter of " + ", ".join(f"{ns}/{m}" for ns, m in sorted(held_by)))
        if name in models:
            clashes.append("the served name of " + ", ".join(f"{ns}/{m}" for ns, m in sorted(models[name])))
        if clashes:
            for resource in carriers[name]:
                report_violation(
                    f"{namespace_of(resource.props)}/{name_of(resource.props)} loads the LoRA adapter {name!r}, which is "
                    f"also {'; '.join(clashes)}: the gateway routes an OpenAI name to one base model",
                    resource.urn,
                )


def adapter_on_own_tenants_base(args: Any, report_violation: Report) -> None:
    """A server loads only adapters its own tenant owns: an adapter never rides on another tenant's base model."""
    adapters = declared_adapters(args.resource_type, args.props)
    if adapters is None:
        return
    namespace = namespace_of(args.props)
    if not adapters:
        report_violation(f"{namespace}/{name_of(args.props)}: {ADAPTERS_ANNOTATION} is not a JSON object of adapters")
    for name, adapter in sorted(adapters.items()):
        if adapter.get("tenant") != namespace:
            report_violation(
                f"{namespace}/{name_of(args.props)} loads the LoRA adapter {name!r} of tenant {adapter.get('tenant')!r} on "
                f"a base model of tenant {namespace!r}: an adapter never rides on another tenant's base model"
            )
