"""A version's chat template on its servers (pure functions): an immutable ConfigMap named after its content,
holding the file, mounted read-only into the vLLM container, which `--chat-template` names (vLLM 0.33.0 reads the
argument as a path with `open()`: vllm/renderers/chat_utils/chat_template.py _load_chat_template). The pods carry the
template's file and SHA-256, so a new template rolls them and `kubectl describe` shows which one serves."""

from __future__ import annotations

from typing import Any

from ..shapes import ServerPlan

TEMPLATE_DIR = "/etc/vllm/chat-template"
TEMPLATE_KEY = "chat-template.jinja"
TEMPLATE_VOLUME = "chat-template"
ANNOTATION_CHAT_TEMPLATE = "inference.platform/chat-template"


def config_map_name(plan: ServerPlan) -> str:
    """Named after its content, and immutable: an edited template is a new ConfigMap and rolls the pods onto it, never
    a changed one under pods that started with the old text (an old pod restarting mid-rollout keeps its own)."""
    template = plan.chat_template
    assert template is not None
    return f"{plan.name}-chat-template-{template.sha256[:10]}"


def chat_template_config_map(plan: ServerPlan) -> dict[str, Any] | None:
    template = plan.chat_template
    if template is None:
        return None
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": config_map_name(plan),
            "namespace": plan.namespace,
            "labels": plan.labels,
            "annotations": {ANNOTATION_CHAT_TEMPLATE: annotation_value(plan)},
        },
        "data": {TEMPLATE_KEY: template.text},
        "immutable": True,
    }


def annotation_value(plan: ServerPlan) -> str:
    template = plan.chat_template
    assert template is not None
    return f"{template.file}@sha256:{template.sha256}"


def chat_template_annotations(plan: ServerPlan) -> dict[str, str]:
    return {} if plan.chat_template is None else {ANNOTATION_CHAT_TEMPLATE: annotation_value(plan)}


def chat_template_args(plan: ServerPlan) -> list[str]:
    return [] if plan.chat_template is None else ["--chat-template", f"{TEMPLATE_DIR}/{TEMPLATE_KEY}"]


def chat_template_volumes(plan: ServerPlan) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, mounts) of the template: none for a version without one."""
    if plan.chat_template is None:
        return [], []
    volume = {"name": TEMPLATE_VOLUME, "configMap": {"name": config_map_name(plan)}}
    return [volume], [{"name": TEMPLATE_VOLUME, "mountPath": TEMPLATE_DIR, "readOnly": True}]
