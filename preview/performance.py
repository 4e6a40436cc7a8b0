"""The Serving performance stage: whether each server's model fits its GPU with the KV cache its concurrency needs,
how fast it answers, whether `maxReplicas` meets its peak within the latency target, and what a million output
tokens cost, from the program's `servingShapes` (components/plan_reports.py) and NVIDIA's aiconfigurator.

aiconfigurator runs in its own virtualenv (`.venv-perf`, `preview/performance_worker.py`; asked and read back by
`preview/performance_prediction.py`), started and asked when the program exports its servers (its first export, before
it registers a resource) unless their answer is kept, so it predicts while the program registers and the other stages
run. Its two answers are kept apart:
- memory, for every server whose architecture is known: aiconfigurator-core's `estimate_kv_cache`, its native vLLM
  memory model (weights, activations at vLLM's batched-token budget, NCCL and CUDA overhead) against the device;
- latency, where its database measured vLLM on that GPU (aiconfigurator 0.12.0: vLLM 0.24.0 data for h100_sxm,
  h200_sxm, l40s and others; none for l4): `cli_estimate`'s aggregated (continuous batching) estimate. On a MIG slice
  the whole GPU's prediction is scaled by the slice's share (prefill by its compute slices of 7, decode by its memory
  slices of 8, as each is bound by the one), and labelled an estimate; a time-sliced share, an embedding model
  and a GPU without data get "no prediction" and why.

Findings: a model that does not fit, a KV cache holding fewer sequences of `maxModelLen` than `maxNumSeqs`, a
`maxModelLen` beyond the model's context length, and (failing in production, a warning elsewhere) a latency
target the servers cannot meet or a peak that needs more replicas than `maxReplicas`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from platform_config.gpu_catalog import COMPUTE_SLICES, GPU_MODELS, MEMORY_SLICES

from .performance_prediction import DATABASE_VLLM_VERSION, PLOT_FILE, Prediction, draw_plot
from .policy_runner import PERFORMANCE_POLICY, PolicyConfigError
from .report import Section

# The policy config sets the stage's level under the pack policy's name (PERFORMANCE_POLICY), as a policy's
# (advisory, mandatory, disabled): it applies to what the servers predict (a latency target or peak they cannot
# meet); what cannot fit fails at every level. Default: mandatory in production, advisory elsewhere.
PERFORMANCE_LEVELS = ("advisory", "mandatory", "disabled")


def performance_level(value: Any) -> str:
    """The level `serving-performance` sets in the policy config: a level, or {"enforcementLevel": level}."""
    level = value.get("enforcementLevel") if isinstance(value, dict) and set(value) == {"enforcementLevel"} else value
    if not isinstance(level, str) or level not in PERFORMANCE_LEVELS:
        raise PolicyConfigError(
            f"policy config {PERFORMANCE_POLICY!r}: give one of {', '.join(PERFORMANCE_LEVELS)} (or "
            f'{{"enforcementLevel": ...}}); got {json.dumps(value)[:80]}'
        )
    return level


# Beside the report: the policy config that carries the stage's verdicts to the pack's serving-performance policy at
# `pulumi up` (policies/inference_governance/serving_performance.py), which the pack cannot compute itself.
PACK_CONFIG_FILE = "pack-config.json"


def preview_policy_config(overrides: dict[str, Any]) -> dict[str, Any]:
    """The policy config the preview's own pack run takes: the pack's serving-performance policy reads the stage's
    verdicts, which exist only once the run has them (the pack is configured first), so there it is disabled and the
    stage holds the servers itself; PACK_CONFIG_FILE carries the verdicts to `pulumi up`."""
    return {**overrides, PERFORMANCE_POLICY: {"enforcementLevel": "disabled"}}


def pack_config(section: Section | None, configured: str | None = None) -> dict[str, Any]:
    """The policy config for `pulumi up`: the stage's verdict on each server's shape, by its digest, and the level the
    policy config set for the stage (`configured`; None: the pack's own default, by its productionStacks). Without an
    answer (the stage could not run), no verdicts: the pack refuses a production stack then, and says nothing
    elsewhere."""
    verdicts = None if section is None else section.data.get("servingVerdicts")
    policy: dict[str, Any] = {"enforcementLevel": "mandatory", "latencyLevel": configured}
    if section is None or verdicts is not None:
        policy["servingVerdicts"] = verdicts or {}
    return {PERFORMANCE_POLICY: policy}


def _slice(row: dict[str, Any]) -> tuple[int, int] | None:
    """A MIG slice's (compute, memory) slices, None for a whole GPU or a share."""
    device = row["device"]
    if device["kind"] != "mig":
        return None
    profile = GPU_MODELS[row["gpu"]].mig_profiles[device["migProfile"]]
    return profile.compute_slices, profile.memory_slices


@dataclass(frozen=True)
class ServerVerdict:
    """What the stage concludes for one server."""

    row: dict[str, Any]
    kv: dict[str, Any] | None
    context_length: int | None
    sequences: int | None
    predictions: list[dict[str, float]] | None
    estimated: bool
    no_prediction: str | None
    findings: list[tuple[str, str, bool]]  # (key, message, mandatory everywhere)
    at_target: dict[str, float] | None = None
    replicas_needed: int | None = None
    cost_per_million: Decimal | None = None


def _scaled(rows: list[dict[str, float]], compute: int, memory: int, osl: int) -> list[dict[str, float]]:
    """A whole GPU's prediction scaled to a MIG slice: prefill by its compute share, decode by its memory share."""
    out = []
    for r in rows:
        ttft = r["ttftMs"] * COMPUTE_SLICES / compute
        tpot = r["tpotMs"] * MEMORY_SLICES / memory
        request_ms = ttft + tpot * max(osl - 1, 0)
        rps = r["concurrency"] * 1000 / request_ms
        out.append(
            {
                "concurrency": r["concurrency"],
                "ttftMs": ttft,
                "tpotMs": tpot,
                "outputTokensPerSecond": rps * osl,
                "requestsPerSecond": rps,
            }
        )
    return out


def _latency_ms(row: dict[str, Any], point: dict[str, float]) -> float:
    """What the latency target bounds: time to first token (for an embedding item, its prefill: all it does), or the
    whole request for a non-streaming profile."""
    if row["latencySli"] in ("ttft", "item"):
        return point["ttftMs"]
    return point["ttftMs"] + point["tpotMs"] * max(row["peak"]["outputTokens"] - 1, 0)


def judge(row: dict[str, Any], answer: dict[str, Any] | None) -> ServerVerdict:
    key = row["key"]
    findings: list[tuple[str, str, bool]] = []
    if answer is None:
        return ServerVerdict(row, None, None, None, None, False, "architecture not declared", findings)
    config = answer.get("config") or {}
    kv = answer.get("kv")
    context = config.get("max_position_embeddings")
    max_model_len = row["maxModelLen"] or context
    if context is not None and row["maxModelLen"] is not None and row["maxModelLen"] > context:
        findings.append(
            (
                row["keys"]["maxModelLen"],
                f"{row['maxModelLen']} tokens, but the model's context length (max_position_embeddings) is {context}",
                True,
            )
        )
    sequences = None
    if kv is not None and "error" in kv:
        findings.append((f"{key}.resources", f"{row['version']} does not fit on {_device(row)}: {kv['error']}", True))
    elif kv is not None and max_model_len:
        sequences = kv["total_kv_size_tokens"] // max_model_len
        if sequences < row["maxNumSeqs"]:
            findings.append(
                (
                    row["keys"]["maxModelLen"],
                    f"{row['version']}: the KV cache holds {kv['total_kv_size_tokens']} tokens on {_device(row)} "
                    f"({kv['kv_size_per_token_bytes']} bytes a token per GPU), {sequences} sequences of {max_model_len}, "
                    f"fewer than the {row['maxNumSeqs']} it runs at once (maxNumSeqs): lower maxModelLen or maxNumSeqs, "
                    "or give it more GPU memory",
                    True,
                )
            )
    predictions = answer.get("predictions")
    estimated = False
    slices = _slice(row)
    if predictions and slices is not None:
        predictions = _scaled(predictions, *slices, row["peak"]["outputTokens"])
        estimated = True
    verdict = ServerVerdict(row, kv, context, sequences, predictions, estimated, answer.get("noPrediction"), findings)
    if not predictions:
        return verdict
    at_target = next(p for p in predictions if p["concurrency"] == row["maxNumSeqs"])
    target = row["latencyTargetMs"]
    meeting = [p for p in predictions if p["requestsPerSecond"] > 0 and (target is None or _latency_ms(row, p) <= target)]
    replicas_needed = None
    if target is not None and not meeting:
        findings.append(
            (
                f"{key}.slo.latencyTargetMs",
                f"{row['version']}: predicted {_latency_ms(row, predictions[0]):.0f} ms even alone on a replica, above the "
                f"{target} ms target",
                False,
            )
        )
    peak_rps = row["peak"]["requestsPerSecond"]
    if peak_rps is not None and meeting:
        best = max(meeting, key=lambda p: p["requestsPerSecond"])
        replicas_needed = math.ceil(peak_rps / best["requestsPerSecond"])
        if replicas_needed > row["replicas"]["max"]:
            findings.append(
                (
                    f"{key}.autoscaling.maxReplicas",
                    f"{row['version']}: the peak of {peak_rps:g} requests/s needs {replicas_needed} replicas within the "
                    f"{target} ms target ({best['requestsPerSecond']:.2f}/s each at {best['concurrency']} concurrent), "
                    f"more than maxReplicas {row['replicas']['max']}",
                    False,
                )
            )
    cost = None
    if row["replicaPerHour"] is not None and at_target["outputTokensPerSecond"] > 0:
        cost = (Decimal(row["replicaPerHour"]) / Decimal(str(at_target["outputTokensPerSecond"])) / 3600 * 1_000_000).quantize(
            Decimal("0.01")
        )
    return ServerVerdict(row, kv, context, sequences, predictions, estimated, None, findings, at_target, replicas_needed, cost)


def _device(row: dict[str, Any]) -> str:
    device = row["device"]
    if device["kind"] == "mig":
        return f"a {device['migProfile']} slice of {row['gpu']}"
    if device["kind"] == "timeSliced":
        return f"a share of {row['gpu']} ({device['sharedBy']} pods)"
    return f"{row['tensorParallel']} x {row['gpu']}"


def _record(v: ServerVerdict) -> dict[str, Any]:
    """A server's verdict as report.json holds it (and a baseline's report is read back from)."""
    row = v.row
    return {
        "server": f"{row['model']}/{row['version']}",
        "device": _device(row),
        "maxReplicas": row["replicas"]["max"],
        "kv": v.kv,
        "contextLength": v.context_length,
        "sequences": v.sequences,
        "atConcurrency": v.at_target,
        "estimated": v.estimated,
        "replicasNeeded": v.replicas_needed,
        "costPerMillionOutputTokens": None if v.cost_per_million is None else str(v.cost_per_million),
        "noPrediction": v.no_prediction,
        "predictions": v.predictions,
    }


CELLS = ("device", "fits", "kv", "ttft", "itl", "tps", "replicas", "cost")


def _cells(record: dict[str, Any]) -> dict[str, str]:
    """The table's cells for one server's record."""
    kv = record.get("kv")
    at = record.get("atConcurrency")
    mark = "~" if record.get("estimated") else ""
    needed = "-" if record.get("replicasNeeded") is None else str(record["replicasNeeded"])
    return {
        "device": record.get("device", "-"),
        "fits": "-" if kv is None else ("no" if "error" in kv else "yes"),
        "kv": "-"
        if record.get("sequences") is None or kv is None
        else f"{kv['total_kv_size_tokens']} tokens ({record['sequences']})",
        "ttft": f"{mark}{at['ttftMs']:.0f} ms" if at else "-",
        "itl": f"{mark}{at['tpotMs']:.1f} ms" if at else "-",
        "tps": f"{mark}{at['outputTokensPerSecond']:.0f}" if at else "-",
        "replicas": f"{needed} / {record.get('maxReplicas', '-')}",
        "cost": record.get("costPerMillionOutputTokens") or "-",
    }


def performance_section(
    shapes: list[dict[str, Any]] | None,
    prediction: Prediction,
    level: str,
    previous: list[dict[str, Any]] | None = None,
    out: Path | None = None,
) -> Section | None:
    """The stage's section at a level (`performance_level`); with the baseline's records (`previous`), each changed
    cell shows old → new, a server the change removes is listed as removed, and the servers whose latency it moves
    are plotted (PLOT_FILE in `out`)."""
    if not shapes:
        return None
    answer = prediction.answer()
    if prediction.problem is not None:
        return Section("Serving performance", prediction.problem, warning=True, data={"problem": prediction.problem})
    answer = answer or {}
    answers = answer.get("servers", {})
    verdicts = [judge(row, answers.get(f"{row['model']}/{row['version']}")) for row in shapes]
    records = [_record(v) for v in verdicts]
    # What cannot fit fails whatever the level; what the servers are predicted to miss, by the level.
    failing = [f for v in verdicts for f in v.findings if f[2] or level == "mandatory"]
    advisory = [f for v in verdicts for f in v.findings if not f[2] and level == "advisory"]
    table, lines = _server_rows(records, verdicts, previous)
    findings_lines = [f"{key}: {message}" for key, message, _ in failing + advisory]
    plotted, plot_note = _latency_plot(records, previous, prediction, out)
    markdown = table + _notes(verdicts, answer, previous) + ["", plot_note]
    markdown += ["", *[f"- {line}" for line in findings_lines]] if findings_lines else []
    # Every preview pays the worker's start while this holds: said where a worker would otherwise stay up.
    no_worker = [f"No worker stays up for the next previews: {prediction.no_worker}"] if prediction.no_worker else []
    markdown += ["", *no_worker] if no_worker else []
    checked = sum(1 for v in verdicts if v.kv is not None)
    predicted = sum(1 for v in verdicts if v.at_target is not None)
    summary = (
        f"{len(verdicts)} servers ({level}): {checked} sized from their architecture, {predicted} with predicted latency"
        + (f"; {len(failing)} findings" if failing else "")
        + (f"; {len(advisory)} advisory" if advisory else "")
    )
    return Section(
        "Serving performance",
        summary,
        failed=bool(failing),
        warning=bool(advisory) and not failing,
        data={
            "servers": records,
            "findings": findings_lines,
            "level": level,
            "package": answer.get("package"),
            "cached": prediction.cached,
            "answeredBy": prediction.answered_by,
            "noWorkerStaysUp": prediction.no_worker,
            "plotted": plotted,
            "servingVerdicts": _serving_verdicts(verdicts),
        },
        markdown="\n".join(markdown),
        lines=lines + findings_lines + no_worker,
        headline="\n".join(table),
    )


def _server_rows(
    records: list[dict[str, Any]], verdicts: list[ServerVerdict], previous: list[dict[str, Any]] | None
) -> tuple[list[str], list[str]]:
    """The table (header first) and the console's lines: a server's cells, old → new where the baseline's differ, a
    server new against the baseline marked so, and one the change removes listed as removed."""
    before = {r["server"]: _cells(r) for r in previous or []}
    table = [
        "| server | device | fits | KV cache (sequences of maxModelLen) | TTFT | ITL | tokens/s per replica | "
        "replicas at peak / max | per 1M output tokens |",
        "|---|---|---|---|---:|---:|---:|---|---:|",
    ]
    lines = []
    for record, v in zip(records, verdicts):
        now = _cells(record)
        was = before.get(record["server"])
        shown = {k: now[k] if was is None or was[k] == now[k] else f"{was[k]} → {now[k]}" for k in CELLS}
        name = record["server"] + (" (new)" if previous is not None and was is None else "")
        table.append(f"| {name} | " + " | ".join(shown[k] for k in CELLS) + " |")
        why = f"no prediction: {v.no_prediction}" if v.no_prediction else ""
        lines.append(
            f"{record['server']:<28} fits {now['fits']:<3} kv {now['kv']:<22} ttft {now['ttft']:>9} itl {now['itl']:>8} "
            f"{now['replicas']:>7}  {why}".rstrip()
        )
    current = {r["server"] for r in records}
    table += [f"| {name} (removed) | " + " | ".join("-" for _ in CELLS) + " |" for name in before if name not in current]
    return table, lines


def _notes(verdicts: list[ServerVerdict], answer: dict[str, Any], previous: list[dict[str, Any]] | None) -> list[str]:
    """Below the table: what the figures are and where they come from, why a server has no prediction, the plot."""
    notes = [
        f"| {v.row['model']}/{v.row['version']} | no prediction: {v.no_prediction} |"
        for v in verdicts
        if v.no_prediction and v.no_prediction != "not asked"
    ]
    markdown = [
        "",
        f"At each server's `maxNumSeqs` concurrent requests per replica and its profile's typical request (or its peak's) "
        f"prompt and output tokens, from aiconfigurator {(answer.get('package') or {}).get('aiconfigurator', '?')}'s "
        f"vLLM {DATABASE_VLLM_VERSION} measurements; `~`: a MIG slice, scaled from the whole GPU (an estimate). "
        "Cost: a replica's share of its node at the pool's price (its pricePerHour, else the AWS list price) over its "
        "output tokens" + ("; old → new against the baseline." if previous is not None else "."),
    ]
    if notes:
        markdown += ["", "| server | |", "|---|---|", *notes]
    return markdown


def _latency_plot(
    records: list[dict[str, Any]], previous: list[dict[str, Any]] | None, prediction: Prediction, out: Path | None
) -> tuple[list[str], str]:
    """The plot a reviewer reads a change by: latency against concurrency for each server whose predictions the change
    moves against the baseline (one it adds included), beside the baseline's curve; none without a baseline, where
    there is no change to show (and matplotlib, about half a CPU-second, is not started). The servers drawn, and the
    report's line that shows the plot or says why there is none."""
    if previous is None or out is None or prediction.python is None:
        return [], "No latency plot: it draws the servers whose predicted latency a change moves (`--baseline`)."
    before = {r["server"]: r.get("predictions") for r in previous}
    moved = [
        {"server": r["server"], "estimated": r["estimated"], "predictions": r["predictions"], "baseline": before.get(r["server"])}
        for r in records
        if r["predictions"] and r["predictions"] != before.get(r["server"])
    ]
    if not moved:
        return [], "No latency plot: the change moves no server's predicted latency."
    problem = draw_plot(prediction.python, moved, out / PLOT_FILE)
    if problem is not None:
        return [], f"No latency plot: {problem}."
    return [m["server"] for m in moved], f"![latency against concurrency, against the baseline (dashed)]({PLOT_FILE})"


def _serving_verdicts(verdicts: list[ServerVerdict]) -> dict[str, dict[str, Any]]:
    """Each server's verdict by its shape's digest, as PACK_CONFIG_FILE carries them to the pack."""
    return {
        v.row["shape"]: {
            "server": f"{v.row['model']}/{v.row['version']}",
            # Split as the pack applies them: a miss fails at the pack's level for the stack (its
            # productionStacks), which need not be the level this preview judged at.
            "failures": [f"{key}: {message}" for key, message, everywhere in v.findings if everywhere],
            "misses": [f"{key}: {message}" for key, message, everywhere in v.findings if not everywhere],
        }
        for v in verdicts
    }
