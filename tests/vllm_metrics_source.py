"""The `vllm:` metrics vLLM 0.33.0's OpenAI server defines, read from its pinned source release
(vllm/v1/metrics/loggers.py PrometheusStatLogger, the default buckets of vllm/v1/metrics/buckets.py) without
importing it, for tests/test_vllm_metrics.py: each metric's type, labels, buckets and the series
prometheus_client exposes for it."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, Literal

from .helpers import vllm_source

LOGGERS = "vllm/v1/metrics/loggers.py"

Kind = Literal["gauge", "counter", "histogram"]
KINDS: dict[str, Kind] = {"_gauge_cls": "gauge", "_counter_cls": "counter", "_histogram_cls": "histogram"}


@dataclass(frozen=True)
class VllmMetric:
    """One metric PrometheusStatLogger defines: its type, label names, buckets (None: none, or
    computed at run time such as build_1_2_5_buckets(max_model_len)), where it is defined, and
    the `if` it is defined under (None: always)."""

    name: str
    kind: Kind
    labels: frozenset[str] | None  # None: computed at run time (an info gauge's config keys)
    buckets: tuple[float, ...] | None
    line: int
    condition: str | None
    # The bucket family its boundaries come from (`histogram_buckets("<family>")`), which a server's
    # --custom-histogram-buckets may replace; None: boundaries of its own.
    family: str | None = None

    def series(self) -> dict[str, frozenset[str]]:
        """The series prometheus_client exposes for it, each with its label names."""
        labels = self.labels or frozenset()
        if self.kind == "gauge":
            return {self.name: labels}
        if self.kind == "counter":
            return {self.name.removesuffix("_total") + "_total": labels}
        return {f"{self.name}_bucket": labels | {"le"}, f"{self.name}_sum": labels, f"{self.name}_count": labels}


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    (found,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    return found


BUCKETS = "vllm/v1/metrics/buckets.py"


def default_buckets() -> dict[str, tuple[float, ...]]:
    """Each histogram family's default boundaries (vLLM 0.33.0 vllm/v1/metrics/buckets.py
    `_STATIC_FAMILY_DEFAULTS`, whose values are the module's literal tuples such as
    TIME_TO_FIRST_TOKEN_BUCKETS). They hold for the platform's servers, which pass no
    `--custom-histogram-buckets`."""
    tree = ast.parse(vllm_source(BUCKETS))
    tuples: dict[str, tuple[float, ...]] = {}
    families: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            if node.target.id == "_STATIC_FAMILY_DEFAULTS":
                assert isinstance(node.value, ast.Dict)
                families = {ast.literal_eval(k): ast.unparse(v) for k, v in zip(node.value.keys, node.value.values) if k}
                continue
            try:
                tuples[node.target.id] = tuple(float(b) for b in ast.literal_eval(node.value))
            except (ValueError, TypeError):
                continue
    assert families, f"{BUCKETS} has no _STATIC_FAMILY_DEFAULTS"
    return {family: tuples[name] for family, name in families.items() if name in tuples}


# Beside a name bound to a family's boundaries, the family's key.
FAMILY_OF = "family of "


def _bindings(cls: ast.ClassDef) -> dict[str, Any]:
    """The literal values the class binds to a local name or a `self.` attribute
    (`labelnames = ["model_name", "engine"]`, `self.labelname_max_lora = "max_lora"`), and the
    boundaries a `histogram_buckets("<family>", overrides=custom_buckets)` call gives a name: its
    family's defaults (`default_buckets`). Boundaries computed from the model
    (`histogram_buckets("request_tokens", max_model_len=...)`) stay unbound."""
    found: dict[str, Any] = {}
    defaults = default_buckets()
    for node in ast.walk(cls):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        value = node.value
        if isinstance(value, ast.Call) and ast.unparse(value.func) == "histogram_buckets":
            family = ast.literal_eval(value.args[0])
            if family in defaults and not any(k.arg == "max_model_len" for k in value.keywords):
                found[ast.unparse(node.targets[0])] = list(defaults[family])
                found[FAMILY_OF + ast.unparse(node.targets[0])] = family
            continue
        try:
            found[ast.unparse(node.targets[0])] = ast.literal_eval(value)
        except ValueError:
            continue
    return found


def _value(node: ast.expr, bindings: dict[str, Any]) -> Any:
    """A literal, a bound name, or a list of them joined with `+`; None when computed at run time."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _value(node.left, bindings), _value(node.right, bindings)
        return None if left is None or right is None else [*left, *right]
    if isinstance(node, ast.List):
        items = [_value(e, bindings) for e in node.elts]
        return None if any(i is None for i in items) else items
    if isinstance(node, ast.Constant):
        return node.value
    return bindings.get(ast.unparse(node))


def vllm_metrics() -> dict[str, VllmMetric]:
    """Every `vllm:` metric PrometheusStatLogger defines in vLLM 0.33.0, by name."""
    tree = ast.parse(vllm_source(LOGGERS))
    imports = {a.name for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == "prometheus_client" for a in n.names}
    assert {"Gauge", "Counter", "Histogram"} <= imports
    logger = _class(tree, "PrometheusStatLogger")
    classes = {
        ast.unparse(s.targets[0]): ast.unparse(s.value) for s in logger.body if isinstance(s, ast.Assign) and len(s.targets) == 1
    }
    assert {k: classes[k] for k in KINDS} == {"_gauge_cls": "Gauge", "_counter_cls": "Counter", "_histogram_cls": "Histogram"}
    bindings = _bindings(logger)
    found: dict[str, VllmMetric] = {}

    def visit(node: ast.AST, condition: str | None) -> None:
        if isinstance(node, ast.If):
            for child in node.body:
                visit(child, ast.unparse(node.test))
            for child in node.orelse:
                visit(child, f"not ({ast.unparse(node.test)})")
            return
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in KINDS:
            keywords = {k.arg: k.value for k in node.keywords if k.arg}
            name = _value(keywords["name"], bindings)
            if isinstance(name, str) and name.startswith("vllm:"):
                labels = _value(keywords["labelnames"], bindings) if "labelnames" in keywords else []
                buckets = _value(keywords["buckets"], bindings) if "buckets" in keywords else None
                family = bindings.get(FAMILY_OF + ast.unparse(keywords["buckets"])) if "buckets" in keywords else None
                assert name not in found, f"{name} defined twice"
                found[name] = VllmMetric(
                    name,
                    KINDS[node.func.attr],
                    None if labels is None else frozenset(labels),
                    None if buckets is None else tuple(float(b) for b in buckets),
                    node.lineno,
                    condition,
                    family,
                )
        for inner in ast.iter_child_nodes(node):
            visit(inner, condition)

    for method in logger.body:
        visit(method, None)
    return found


def exposed_series(metrics: dict[str, VllmMetric]) -> dict[str, tuple[VllmMetric, frozenset[str]]]:
    return {series: (m, labels) for m in metrics.values() for series, labels in m.series().items()}
