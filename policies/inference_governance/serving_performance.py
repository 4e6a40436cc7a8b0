"""The serving-performance policy: a model server's vLLM workload is deployed only as the preview's Serving
performance stage judged it.

The stage (preview/performance.py) needs NVIDIA's aiconfigurator and the program's `servingShapes`, neither of which
the pack has; and the pack is configured before the stage has an answer. So the preview writes its verdicts into a
policy config (`pack-config.json` beside its report: `servingVerdicts`, by the digest of each server's shape), which
the deploy passes as `--policy-pack-config`, and this policy holds every vLLM workload to it: the workload's
`inference.platform/serving-shape` annotation must name a judged shape, and that shape's failures (a model that
cannot load, a KV cache short of its concurrency, and at the stage's level a latency target or peak it cannot meet)
stop the deploy. Without verdicts, a production stack (`productionStacks`) is refused, elsewhere nothing is said.
"""

from __future__ import annotations

from typing import Any

from .kube import FACTS, Report, config, get, name_of
from .resources import is_production

SHAPE_ANNOTATION: str = FACTS["annotations"]["servingShape"]
PREVIEW_COMMAND = "make preview STACK=<stack>"


def serving_performance(args: Any, report_violation: Report) -> None:
    shape = get(args.props, "metadata", "annotations", SHAPE_ANNOTATION)
    if not isinstance(shape, str):
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
    for failure in verdict.get("failures", []):
        report_violation(f"{verdict.get('server', name_of(args.props))}: {failure}")
