"""The serving-performance policy: a model server's vLLM workload is deployed only as the preview's Serving
performance stage judged it.

The stage (preview/performance.py) needs NVIDIA's aiconfigurator and the program's `servingShapes`, neither of which
the pack has; and the pack is configured before the stage has an answer. So the preview writes its verdicts into a
policy config (`pack-config.json` beside its report: `servingVerdicts`, by the digest of each server's shape), which
the deploy passes as `--policy-pack-config`, and this policy holds every vLLM workload to it: the workload's
`inference.platform/serving-shape` annotation must name a judged shape, and that shape's failures (a model that
cannot load, a KV cache short of its concurrency) stop the deploy, and so do its misses (a latency target or peak it
is predicted not to meet) at `latencyLevel`: the level the stage was configured at, else mandatory in a production
stack and advisory elsewhere. Which stacks are production is this pack's setting (`productionStacks`), not the
stack's own `environment`, which the preview judged by. Without verdicts, a production stack is refused, elsewhere
nothing is said.
"""

from __future__ import annotations

from typing import Any

from .kube import FACTS, KNATIVE_SERVICE, MODEL_LABEL, Report, config, containers, get, is_production, name_of, pod_template

SHAPE_ANNOTATION: str = FACTS["annotations"]["servingShape"]
PREVIEW_COMMAND = "make preview STACK=<stack>"
# The workloads a serving backend runs vLLM in (components/backends: deployment.py, knative.py), and the name of the
# server's container there (components/specs/pod.py).
SERVER_TYPES = ("kubernetes:apps/v1:Deployment", KNATIVE_SERVICE)
SERVER_CONTAINER = "vllm"
# The config schema of serving-performance (pack.py declares it), with productionStacks.
# The preview's Serving performance verdicts (its pack-config.json), by the digest of each server's shape: which
# server it is, what fails at any level (it cannot load, its KV cache is short) and what it is predicted to miss (a
# latency target, a peak), which fails at `latencyLevel`: as configured for the stage, else mandatory in production
# (`productionStacks`) and advisory elsewhere (preview/performance.py).
SERVING_VERDICTS = {
    "servingVerdicts": {
        "type": "object",
        "additionalProperties": {
            "type": "object",
            "properties": {
                "server": {"type": "string", "minLength": 1},
                "failures": {"type": "array", "items": {"type": "string"}},
                "misses": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["server", "failures", "misses"],
            "additionalProperties": False,
        },
    },
    "latencyLevel": {"enum": ["advisory", "mandatory", "disabled", None]},
}


def _serves_a_model(args: Any) -> bool:
    """A model's vLLM server: a serving workload whose pods carry the model label and run the server's container."""
    template = pod_template(args.resource_type, args.props) if args.resource_type in SERVER_TYPES else None
    if template is None or get(template, "metadata", "labels", MODEL_LABEL) is None:
        return False
    return any(get(c, "name") == SERVER_CONTAINER for c in containers(get(template, "spec", default={})))


def serving_performance(args: Any, report_violation: Report) -> None:
    shape = get(args.props, "metadata", "annotations", SHAPE_ANNOTATION)
    if not isinstance(shape, str):
        # Outside production a workload the program did not annotate is not judged; in production every server is.
        if is_production(args) and _serves_a_model(args):
            report_violation(
                f"{name_of(args.props)}: a model server without its {SHAPE_ANNOTATION} annotation, so no verdict "
                "of the preview's Serving performance stage can be matched to it; in production every server is judged"
            )
        return
    verdicts = config(args).get("servingVerdicts")
    if verdicts is None:
        if is_production(args):
            report_violation(
                f"{name_of(args.props)}: no verdict of the preview's Serving performance stage was given; run "
                f"`{PREVIEW_COMMAND}` and pass its pack-config.json as --policy-pack-config (the deploy workflow does)"
            )
        return
    verdict = verdicts.get(shape)
    if verdict is None:
        report_violation(
            f"{name_of(args.props)}: its serving shape {shape} is not one the given verdicts judged (the servers "
            f"changed since that preview); run `{PREVIEW_COMMAND}` again and pass its pack-config.json"
        )
        return
    level = config(args).get("latencyLevel") or ("mandatory" if is_production(args) else "advisory")
    for failure in [*verdict.get("failures", []), *(verdict.get("misses", []) if level == "mandatory" else [])]:
        report_violation(f"{verdict.get('server', name_of(args.props))}: {failure}")
