"""Report sections built from what the program exported."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from platform_config.cold_start import S3_STREAM
from platform_config.guard_rails import weakenings

from .admission import AdmissionResult
from .diff import Diff
from .first_up import FirstUpResult
from .policy_runner import PERFORMANCE_POLICY, PolicyRun
from .report import Section, short_type

if TYPE_CHECKING:  # jsonschema loads only when the schema stage runs
    from .schemas import ObjectResult
    from .upstream import PinResult


def capacity_section(stack_outputs: dict[str, Any]) -> Section:
    """The capacity table the program exports as `gpuCapacity` (quotas against pool supply)."""
    rows = stack_outputs.get("gpuCapacity") or []
    if not rows:
        return Section("Capacity", "no capacity table exported", data=[])
    over = [r for r in rows if not r["withinCapacity"]]
    lines = []
    table = [
        "| resource | kind | pools supply (at maxSize) | tenant quotas | of which endpoint pickers at peak | used |",
        "|---|---|---|---|---|---:|",
    ]
    for row in rows:
        supply = ", ".join(f"{p} {v}" for p, v in row["supplyByPool"].items()) or "-"
        demand = ", ".join(f"{t} {v}" for t, v in row["demandByTenant"].items()) or "-"
        pickers = ", ".join(f"{t} {v}" for t, v in row.get("endpointPickersByTenant", {}).items()) or "-"
        used = f"{row['utilisationPercent']}%" if row["utilisationPercent"] is not None else "-"
        table.append(
            f"| `{row['resource']}` | {row['kind']} | {row['supply']} ({supply}) | {row['demand']} ({demand}) | {pickers} "
            f"| {used} |"
        )
        lines.append(f"{row['resource']:<26} supply {row['supply']:>8}  quotas {row['demand']:>8}  {used:>5}  {row['kind']}")
    summary = (
        f"{len(rows)} resource kinds, all quotas within pool capacity"
        if not over
        else f"{len(over)} resource kinds over capacity"
    )
    return Section("Capacity", summary, failed=bool(over), data=rows, markdown="\n".join(table), lines=lines)


def cold_start_section(stack_outputs: dict[str, Any]) -> Section:
    """Per model, the expected cold start of a new replica on its pool's weight cache (the program's `coldStarts`):
    the image on a node that has not pulled it, the weights, the engine's start, and the arithmetic."""
    rows = stack_outputs.get("coldStarts") or []
    if not rows:
        return Section("Cold start", "no models", data=[])
    over = [r for r in rows if r["totalSeconds"] > r["scaleUpBudgetSeconds"]]
    # What the config checks refuse (check_cold_start_within_scale_up_budget), shown should it ever get this far.
    uncovered = [r for r in over if r["latencySensitive"] and r["minReplicas"] == 0]
    table = [
        "| model | pool (weight cache, rate) | image | weights | engine start | cold start | on a new node | startup probe "
        "| progress deadline | scale-up budget |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    lines, sums = [], []
    for row in rows:
        if row not in over:
            budget = "within"
        elif not row["latencySensitive"]:
            budget = "over (not latency-sensitive)"
        else:
            budget = f"over: warm minimum {row['minReplicas']}"
        table.append(
            f"| {row['model']} | {row['pool']} ({row['medium']}, {_weights_rate(row)}) | {row['imageSeconds']} s "
            f"| {row['weightsSeconds']} s | {row['engineSeconds']} s | **{_minutes(row['totalSeconds'])}** "
            f"| {_minutes(row['onNewNodeSeconds'])} "
            f"| {row['startupProbeSeconds']} s | {row['progressDeadlineSeconds']} s | {budget} "
            f"({_minutes(row['scaleUpBudgetSeconds'])}) |"
        )
        sums.append(f"- {row['model']}: {row['arithmetic']}")
        lines.append(f"{row['model']:<18} {row['pool']:<10} {_minutes(row['totalSeconds']):>12}  {budget}")
    summary = (
        f"{len(rows)} models, {len(rows) - len(over)} within the scale-up budget"
        + (f", {len(over)} over it with a warm minimum or not latency-sensitive" if over and not uncovered else "")
        + (f", {len(uncovered)} latency-sensitive over it without a warm minimum" if uncovered else "")
    )
    notes = [
        "",
        "Cold start: image, weights and engine start of a new replica on a node of its pool with room for it; on a "
        "node that has been up the pre-pull DaemonSet has pulled the image already, and the image part is gone. On a "
        "new node: the node's expected join (launch, boot, RAID0, registration) comes first. The rate is what the "
        "weights come at: downloaded from outside the VPC, or on `s3Stream` streamed from S3 into GPU memory "
        "(`downloadGbps` in `coldStarts` carries either).",
        "",
        "The arithmetic (sizes in GB of 10^9 bytes, rounded up to whole seconds):",
        "",
    ]
    markdown = "\n".join([*table, *notes, *sums])
    return Section("Cold start", summary, failed=bool(uncovered), data=rows, markdown=markdown, lines=lines)


def _weights_rate(row: dict[str, Any]) -> str:
    """The rate a cold start row's weights arrive at, named for what it is: its `downloadGbps` is the S3 stream's rate
    on a streaming pool, the download's elsewhere (platform_config/cold_start.cold_start)."""
    what = "S3 stream" if row["medium"] == S3_STREAM else "download"
    return f"{what} {row['downloadGbps']:g} Gbit/s"


def _minutes(seconds: int) -> str:
    return f"{seconds // 60} min {seconds % 60:02d} s"


def adapters_section(adapters: dict[str, Any]) -> Section:
    """Each base model's LoRA modules, vLLM's LoRA limits and what they hold per replica (the program's `loraAdapters`
    output): GPU = maxLoras x maxLoraRank x E x 2 bytes, CPU = the maxCpuLoras largest modules' rank x E x 2 bytes, E
    = layers x (9 hidden + 2 kv + 3 intermediate) (platform_config/adapters.py)."""
    rows = [
        "| model | modules (rank) | max-loras | max-lora-rank | max-cpu-loras | GPU per replica | CPU per replica |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    lines = []
    for model, entry in adapters.items():
        modules = ", ".join(f"{m['module']} ({m['rank']})" for m in entry["modules"])
        gpu, cpu = entry["gpuMemoryPerReplica"] or "not estimated", entry["cpuMemoryPerReplica"] or "not estimated"
        rows.append(
            f"| {model} | {modules} | {entry['maxLoras']} | {entry['maxLoraRank']} | {entry['maxCpuLoras']} | {gpu} | {cpu} |"
        )
        lines.append(
            f"{model}: {modules}; --max-loras {entry['maxLoras']} --max-lora-rank {entry['maxLoraRank']} "
            f"--max-cpu-loras {entry['maxCpuLoras']}; GPU {gpu}, CPU {cpu} per replica"
        )
    count = sum(len(entry["modules"]) for entry in adapters.values())
    return Section(
        "LoRA adapters", f"{count} modules on {len(adapters)} base models", data=adapters, markdown="\n".join(rows), lines=lines
    )


def queue_bound_section(stack_outputs: dict[str, Any]) -> Section | None:
    """The queue bounds the program exports as `queueBounds`: per model, tier and path, how long and
    how many requests wait for a server, who bounds it and what the client gets past it."""
    rows = stack_outputs.get("queueBounds") or []
    if not rows:
        return None
    table = [
        "| model | tier | path | wait at most | queued at most | gateway pending per pod | past it |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    lines = []
    for row in rows:
        if row["boundSeconds"] is not None:
            seconds = f"{row['boundSeconds']} s"
        elif row.get("prefillBacklogSeconds") is not None:
            seconds = f"untimed ({row['prefillBacklogSeconds']} s of prefill)"
        else:
            seconds = "no time bound"
        queued = f"{row['boundRequests']} per {row['boundRequestsPer']}" if row["boundRequests"] is not None else "unbounded"
        table.append(
            f"| {row['model']} | {row['tier']} | {row['path']} | {seconds} | {queued} | {row['gatewayPendingPerPod']} | "
            f"{row['answer']} |"
        )
        lines.append(f"{row['model']:<32} {row['tier']:<9} {seconds:>14}  {queued:>18}  {row['answer']}")
    bounded = sum(1 for row in rows if row["boundSeconds"] is not None)
    summary = (
        f"every model tier ({bounded}) waits at most its queue timeout"
        if bounded == len(rows)
        else f"{bounded} of {len(rows)} model tiers wait at most their queue timeout; the others until their route timeout"
    )
    return Section("Queue bounds", summary, data=rows, markdown="\n".join(table), lines=lines)


def batch_queue_section(stack_outputs: dict[str, Any]) -> Section | None:
    """The batch quotas in Kueue the program exports as `batchQueues`: per pool and GPU resource,
    each tenant's nominal quota, what it may borrow from the cohort and what it reclaims."""
    rows = stack_outputs.get("batchQueues") or []
    if not rows:
        return None
    over = [r for r in rows if not r["withinSupply"]]
    table = [
        "| pool | resource | supply (at maxSize) | nominal | tenant: nominal / borrowable / reclaimable |",
        "|---|---|---:|---:|---|",
    ]
    lines = []
    for row in rows:
        tenants = ", ".join(f"{t} {v['nominal']} / {v['borrowable']} / {v['reclaimable']}" for t, v in row["byTenant"].items())
        table.append(f"| {row['pool']} | `{row['resource']}` | {row['supply']} | {row['nominal']} | {tenants} |")
        lines.append(f"{row['pool']:<12} {row['resource']:<24} supply {row['supply']:>4}  nominal {row['nominal']:>4}  {tenants}")
    summary = (
        f"{len(rows)} pool resources queued through Kueue, nominal quotas within supply"
        if not over
        else f"{len(over)} pool resources whose nominal batch quotas exceed the pool"
    )
    return Section("Batch queues", summary, failed=bool(over), data=rows, markdown="\n".join(table), lines=lines)


def registry_section(registry: dict[str, Any]) -> Section:
    """Which MLflow registry versions the stack's references resolved to, and where: the live registry or a
    recording (the program's `modelRegistry` output)."""
    if registry["resolvedFrom"] == "live":
        summary = f"resolved live at {registry['trackingUri']}"
    else:
        summary = (
            f"resolved from the recorded file {registry['recordingFile']} (recorded {registry['recordedAt']} from "
            f"{registry['trackingUri']}), not the live registry"
        )
    differences = registry.get("lockDifferences", [])
    if "lockFile" in registry:
        summary += (
            f"; {len(differences)} answers the lock file {registry['lockFile']} does not hold: `pulumi up` would stop"
            if differences
            else f"; every answer held by the lock file {registry['lockFile']}"
        )
    rows = ["| model | version | registered model | alias or version | registry version | weights |", "|---|---|---|---|---|---|"]
    lines = list(differences)
    for model, versions in registry["models"].items():
        for version, entry in versions.items():
            if entry.get("source") != "registry":
                rows.append(f"| {model} | {version} | - | - | - | pinned in the stack file |")
                continue
            asked = f"alias {entry['alias']}" if "alias" in entry else f"version {entry['version']}"
            rows.append(
                f"| {model} | {version} | `{entry['registeredModel']}` | {asked} | {entry['registryVersion']} "
                f"| `{entry['weights']}` |"
            )
            lines.append(
                f"{model}/{version}: {entry['registeredModel']} {asked} -> version {entry['registryVersion']} "
                f"({entry['weights']})"
            )
    markdown = "\n".join([*(f"- {d}" for d in differences), *([""] if differences else []), *rows])
    return Section("Model registry", summary, failed=bool(differences), data=registry, markdown=markdown, lines=lines)


def schema_section(results: list[ObjectResult], kubernetes_version: str, crd_dir: str) -> Section:
    invalid = [r for r in results if r.status == "invalid"]
    unvalidated = [r for r in results if r.status == "not-validated"]
    valid = len(results) - len(invalid) - len(unvalidated)
    summary = f"{valid}/{len(results)} objects valid (Kubernetes {kubernetes_version} strict + CRD schemas)"
    if invalid:
        summary += f", {len(invalid)} invalid"
    if unvalidated:
        summary += f", {len(unvalidated)} not validated (no schema)"
    lines = []
    for r in invalid:
        lines.append(f"INVALID {r.label}")
        lines.extend(f"  {error}" for error in r.errors[:5])
    lines.extend(f"NOT VALIDATED {r.label}: {r.schema}" for r in unvalidated)
    rows = ["| object | schema | result |", "|---|---|---|"]
    for r in results:
        verdict = {"valid": "valid", "invalid": "**invalid**: " + "; ".join(r.errors[:3]), "not-validated": "**not validated**"}[
            r.status
        ]
        rows.append(f"| {r.label} | {r.schema} | {verdict} |")
    data = {
        "kubernetesVersion": kubernetes_version,
        "crdSchemaDir": crd_dir,
        "valid": valid,
        "invalid": [{"object": r.label, "schema": r.schema, "errors": r.errors} for r in invalid],
        "notValidated": [{"object": r.label, "looked": r.schema} for r in unvalidated],
        "objects": [{"object": r.label, "schema": r.schema, "status": r.status} for r in results],
    }
    return Section("Schemas", summary, failed=bool(invalid), data=data, markdown="\n".join(rows), lines=lines)


def _value(value: Any, width: int = 60) -> str:
    """A changed input's value in one short line (JSON, cut to `width`)."""
    if value is None:
        return "(none)"
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= width else text[: width - 3] + "..."


def _values(old: Any, new: Any, width: int = 60) -> tuple[str, str]:
    """A changed input's old and new value, each in one short line; two long strings from where they first
    differ, so the change shows rather than their common beginning."""
    if isinstance(old, str) and isinstance(new, str) and max(len(old), len(new)) > width:
        start = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
        start = max(0, start - 10)
        before, after = (("..." if start else "") + _value(text[start:], width).strip('"') for text in (old, new))
        return before, after
    return _value(old, width), _value(new, width)


# How many changed inputs the report lists per resource, and how many resources' changes the summary shows.
CHANGED_VALUES_SHOWN = 8
CHANGES_IN_SUMMARY = 25


def changes_section(diff: Diff, baseline: str) -> Section:
    """Resources to add, update in place, replace and delete against the baseline, each changed input with its old
    and new value, and the workloads whose pods the change rolls."""
    updated = [c for c in diff.changed if not c.replacing]
    summary = (
        "no changes"
        if diff.empty
        else f"{len(diff.added)} to add, {len(updated)} to change in place, {len(diff.replaced)} to replace, "
        f"{len(diff.removed)} to delete; pods of {len(diff.rolling)} workloads roll"
    )
    lines = [f"+ {c.type} {c.name}" for c in diff.added]
    for c in diff.changed:
        mark = "+-" if c.replacing else "~"
        lines.append(f"{mark} {c.type} {c.name}{' (replaced: ' + ', '.join(c.replacing[:3]) + ')' if c.replacing else ''}")
        lines += [f"    {path}: {' -> '.join(_values(old, new))}" for path, old, new in c.values[:CHANGED_VALUES_SHOWN]]
        if len(c.values) > CHANGED_VALUES_SHOWN:
            lines.append(f"    ... and {len(c.values) - CHANGED_VALUES_SHOWN} more")
    lines += [f"- {c.type} {c.name}" for c in diff.removed]
    data = {
        "baseline": baseline,
        "added": [{"urn": c.urn, "type": c.type} for c in diff.added],
        "changed": [
            {
                "urn": c.urn,
                "type": c.type,
                "paths": c.paths,
                "values": [{"path": p, "old": old, "new": new} for p, old, new in c.values],
                "replacing": c.replacing,
                "rollsPods": c.rolls_pods,
            }
            for c in diff.changed
        ],
        "removed": [{"urn": c.urn, "type": c.type} for c in diff.removed],
        "rolling": [c.urn for c in diff.rolling],
    }
    markdown = "\n".join(["```diff", *lines, "```"]) if lines else "No changes."
    headline = "\n".join(changes_summary_markdown(data)) if not diff.empty else ""
    return Section(f"Changes against {baseline}", summary, data=data, markdown=markdown, lines=lines, headline=headline)


def _cell(text: str) -> str:
    """Text as code in a Markdown table cell: its pipes escaped (GitHub splits the row on a bare one, even inside
    code), and fenced with more backticks than it holds."""
    text = text.replace("|", "\\|")
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


# How many changed inputs of one resource the summary's table shows.
VALUES_IN_SUMMARY = 4


def _resource_cell(entry: dict[str, Any]) -> str:
    """A changed resource in the summary's table: its name and kind."""
    return f"`{entry['urn'].rsplit('::', 1)[-1]}` ({short_type(entry['type'])})"


def changes_summary_markdown(diff_data: dict[str, Any]) -> list[str]:
    """The top of a pull request's comment: what is added, replaced and deleted, each changed input's old and new
    value (the first CHANGES_IN_SUMMARY resources), and whose pods roll."""
    rows = ["| | resource | what changes |", "|---|---|---|"]
    # Replacements first: they are what a reviewer must not miss, and the table shows only the first ones.
    changed = sorted(diff_data["changed"], key=lambda entry: not entry["replacing"])
    for entry in diff_data["added"]:
        rows.append(f"| add | {_resource_cell(entry)} | |")
    for entry in changed[:CHANGES_IN_SUMMARY]:
        action = "replace" if entry["replacing"] else "update"
        values = "<br>".join(
            f"{_cell(v['path'])}: " + " → ".join(_cell(text) for text in _values(v["old"], v["new"], 40))
            for v in entry["values"][:VALUES_IN_SUMMARY]
        )
        hidden = len(entry["values"]) - VALUES_IN_SUMMARY
        more = f"<br>and {hidden} more" if hidden > 0 else ""
        rows.append(f"| {action} | {_resource_cell(entry)} | {values}{more} |")
    if len(diff_data["changed"]) > CHANGES_IN_SUMMARY:
        rows.append(f"| | and {len(diff_data['changed']) - CHANGES_IN_SUMMARY} more changed resources | |")
    for entry in diff_data["removed"]:
        rows.append(f"| delete | {_resource_cell(entry)} | |")
    rolling = [urn.rsplit("::", 1)[-1] for urn in diff_data["rolling"]]
    if rolling:
        rows += ["", f"Pods roll for: {', '.join(f'`{name}`' for name in rolling)}."]
    return rows


def policy_section(run: PolicyRun) -> Section:
    mandatory = run.mandatory
    advisory = [d for d in run.diagnostics if d not in mandatory]
    weakened = {p["name"]: p for p in run.policies if p["level"] != p["declaredLevel"] and p["name"] != PERFORMANCE_POLICY}
    summary = (
        f"pack {run.pack} {run.version}: {len(run.policies)} policies over {run.analyzed} resources and the stack, "
        f"{len(mandatory)} mandatory and {len(advisory)} advisory violations"
    )
    disabled = sum(1 for p in run.policies if p["level"] == "disabled" and p["name"] != PERFORMANCE_POLICY)
    if disabled:
        summary += f"; {disabled} {'policy' if disabled == 1 else 'policies'} disabled"
    if any(p["name"] == PERFORMANCE_POLICY for p in run.policies):
        summary += f"; {PERFORMANCE_POLICY} held by the Serving performance stage"
    lines = [f"WARNING {w}" for w in run.warnings]
    lines += [
        f"{d.level.upper()} {d.policy}: {d.message.splitlines()[-1]}" + (f" [{d.urn.rsplit('::', 1)[-1]}]" if d.urn else "")
        for d in mandatory + advisory
    ]
    rows = ["| policy | level | resource | message |", "|---|---|---|---|"]
    rows += [
        f"| {d.policy} | {d.level} | {d.urn.rsplit('::', 1)[-1] if d.urn else '(stack)'} | {d.message.splitlines()[-1]} |"
        for d in mandatory + advisory
    ]
    if not run.diagnostics:
        rows = ["No violations. Policies: " + ", ".join(_policy_name(p) for p in run.policies) + "."]
    if weakened:
        rows = [
            "Levels set by the policy config:",
            "",
            "| policy | pack's level | level run |",
            "|---|---|---|",
            *(f"| {p['name']} | {p['declaredLevel']} | **{p['level']}** |" for p in weakened.values()),
            "",
            *rows,
        ]
    rows = [*(f"- **Warning:** {w}" for w in run.warnings), *([""] if run.warnings else []), *rows]
    data = {
        "pack": run.pack,
        "version": run.version,
        "policies": run.policies,
        "warnings": run.warnings,
        "analyzedResources": run.analyzed,
        "diagnostics": [d.to_json() for d in run.diagnostics],
        "engineLog": run.engine_log,
    }
    return Section("Policies", summary, failed=bool(mandatory), data=data, markdown="\n".join(rows), lines=lines)


def _policy_name(policy: dict[str, str]) -> str:
    """A policy's name, with the level it ran at when the policy config changed it (or where the preview holds it)."""
    if policy["name"] == PERFORMANCE_POLICY:
        return f"{policy['name']} (held by the Serving performance stage)"
    return policy["name"] if policy["level"] == policy["declaredLevel"] else f"{policy['name']} ({policy['level']})"


def admission_section(result: AdmissionResult) -> Section:
    """Every pod template through admission and onto its pool at peak."""
    admitted = [w for w in result.workloads if not w.findings]
    scheduled = sum(1 for w in result.workloads if w.pool is not None and w.placed >= w.peak)
    summary = (
        f"{len(admitted)}/{len(result.workloads)} pod templates admitted, {scheduled}/{len(result.workloads)} "
        f"schedulable at peak on their pools"
    )
    if result.findings:
        summary += f", {len(result.findings)} findings"
    if result.unchecked_placement_note:
        summary += f"; {result.unchecked_placement_note}"
    rows = ["| workload | pool | pods at peak | placed | admitted |", "|---|---|---:|---:|---|"]
    for w in result.workloads:
        verdict = "yes" if not w.findings else "**no**: " + "; ".join(w.findings[:3])
        rows.append(f"| {w.label} | {w.pool or '-'} | {w.peak} | {w.placed} | {verdict} |")
    data = {
        "workloads": [
            {"workload": w.label, "pool": w.pool, "peakPods": w.peak, "placedPods": w.placed, "findings": w.findings}
            for w in result.workloads
        ],
        "findings": result.findings,
        "leftToClusterScheduler": [w.label for w in result.left_to_cluster_scheduler],
    }
    return Section(
        "Admission and scheduling",
        summary,
        failed=result.failed,
        data=data,
        markdown="\n".join(rows),
        lines=list(result.findings),
    )


def first_up_section(result: FirstUpResult) -> Section:
    """Every webhook the installers register, what of the program's it intercepts, and what would
    be created before the webhook or CRD it needs."""
    webhooks = result.webhooks
    intercepting = sum(1 for _, _, hit in webhooks if hit)
    summary = (
        f"{len(webhooks)} admission webhooks from {len(result.installers)} installers, {intercepting} intercepting "
        "objects of this program"
    )
    if result.findings or result.unread:
        summary += f", {len(result.findings)} ordering findings"
        if result.unread:
            summary += f", {len(result.unread)} installers whose webhooks were not read"
    else:
        summary += ", each waited for by everything it intercepts"
    rows = [
        "| installer | webhook | kind | failure policy | intercepts | namespaces | objects | of this program | read at |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, w, hit in webhooks:
        rules = "; ".join(rule.describe() for rule in w.rules)
        namespaces = w.namespace_selector.describe() if w.namespace_selector else "all"
        objects = w.object_selector.describe() if w.object_selector else "all"
        policy = w.failure_policy + (f" ({w.note})" if w.note else "")
        rows.append(
            f"| {label} | `{w.name}` | {w.kind} | {policy} | {rules} | {namespaces} | {objects} | {len(hit)} | {w.source} |"
        )
    rows += ["", "| installer | awaited | CRD groups | read at |", "|---|---|---|---|"]
    for record in result.installers:
        awaited = "yes" if record.awaited else f"**no**: {record.unawaited_reason}"
        groups = ", ".join(record.installer.crd_groups) or "-"
        rows.append(f"| {record.label} | {awaited} | {groups} | {record.installer.read_at} |")
    lines = [
        *result.findings,
        *(f"{entry}; what it registers is unknown until read at its tag (preview/webhook_inventory/)" for entry in result.unread),
    ]
    if lines:
        rows += ["", *(f"- {line}" for line in lines)]
    data = {
        "installers": [
            {
                "installer": r.label,
                "awaited": r.awaited,
                "crdGroups": list(r.installer.crd_groups),
                "readAt": r.installer.read_at,
            }
            for r in result.installers
        ],
        "webhooks": [
            {
                "installer": label,
                "name": w.name,
                "kind": w.kind,
                "failurePolicy": w.failure_policy,
                "rules": [rule.describe() for rule in w.rules],
                "namespaceSelector": w.namespace_selector.describe() if w.namespace_selector else None,
                "objectSelector": w.object_selector.describe() if w.object_selector else None,
                "source": w.source,
                "intercepts": hit,
            }
            for label, w, hit in webhooks
        ],
        "findings": result.findings,
        "unread": result.unread,
    }
    return Section("First up", summary, failed=result.failed, data=data, markdown="\n".join(rows), lines=lines)


def upstream_section(results: list[PinResult], facts: str) -> Section:
    """Pins and rendered values against the upstream facts: verified, unverified, failed."""
    failed = [r for r in results if r.status == "failed"]
    unverified = [r for r in results if r.status == "unverified"]
    summary = f"{len(results) - len(failed) - len(unverified)}/{len(results)} verified against {facts}"
    if unverified:
        summary += f", {len(unverified)} unverified"
    if failed:
        summary += f", {len(failed)} failed"
    lines = [f"FAILED {r.pin} {r.version}: {d}" for r in failed for d in r.details]
    lines += [f"UNVERIFIED {r.pin} {r.version}: {'; '.join(r.details)}" for r in unverified]
    rows = ["| pin | version | status | details |", "|---|---|---|---|"]
    rows += [f"| {r.pin} | {r.version} | {r.status} | {'; '.join(r.details) or '-'} |" for r in results]
    data = {"factsDir": facts, "pins": [r.to_json() for r in results]}
    return Section("Upstream pins", summary, failed=bool(failed), data=data, markdown="\n".join(rows), lines=lines)


def guard_rail_section(previous: dict[str, Any] | None, current: dict[str, Any] | None, source: str) -> Section | None:
    """Production guard rails (platform_config/guard_rails.py): what this change weakens of the baseline's security
    posture (`securityPosture`), refused in a production stack unless its `acknowledge` names it; acknowledged ones
    are listed as findings, and an acknowledgement that names nothing this change does is reported too, so none
    outlives its change."""
    if current is None:
        return None
    if previous is None:
        return Section("Guard rails", f"nothing to compare against ({source})", data={"weakenings": []})
    found = weakenings(previous, current)
    acknowledged = set(current.get("acknowledged") or [])
    production = bool(current.get("production"))
    rows = []
    for weakening in found:
        if weakening.acknowledgement in acknowledged:
            verdict = "acknowledged"
        else:
            verdict = "refused" if production else "noted (not production)"
        rows.append({"acknowledgement": weakening.acknowledgement, "message": weakening.message, "verdict": verdict})
    unused = sorted(acknowledged - {w.acknowledgement for w in found})
    refused = [r for r in rows if r["verdict"] == "refused"]
    lines = [
        f"{'REFUSED' if r['verdict'] == 'refused' else r['verdict']:<12} {r['acknowledgement']}: {r['message']}"
        + (
            f" (add acknowledge: [{r['acknowledgement']}] to the stack file if this is meant)"
            if r["verdict"] == "refused"
            else ""
        )
        for r in rows
    ]
    lines += [f"{'unused':<12} {name}: this change weakens nothing it names; remove it" for name in unused]
    if refused:
        summary = f"{len(refused)} weakening(s) of a production stack not acknowledged (against {source})"
    elif rows:
        summary = f"{len(rows)} weakening(s), each acknowledged or outside production (against {source})"
    else:
        summary = f"this change weakens nothing (against {source})"
    table = ["| weakening | what | verdict |", "|---|---|---|"]
    table += [f"| {r['acknowledgement']} | {r['message']} | {r['verdict']} |" for r in rows]
    table += [f"| {name} | acknowledged, but this change does not do it | unused |" for name in unused]
    return Section(
        "Guard rails",
        summary,
        failed=bool(refused) or bool(unused and production),
        data={"weakenings": rows, "unusedAcknowledgements": unused},
        markdown="\n".join(table),
        lines=lines,
    )


def _price_from(pool: dict[str, Any]) -> str:
    source = {"pricePerHour": "the stack's pricePerHour", "list": "AWS list price"}.get(pool.get("priceSource") or "", "-")
    return f"{source} ({pool['priceNote']})" if pool.get("priceSource") and pool.get("priceNote") else source


def cost_section(current: dict[str, Any] | None, previous: dict[str, Any] | None) -> Section | None:
    """What the program exports as `costPerHour` (components/plan_reports.py cost_report): per hour at minimum and
    at maximum scale, the environment's pools and each tenant's share, with the previous figures (the baseline's or
    the deployed stack's outputs) beside them where they differ."""
    if not current:
        return None

    def rows(cost: dict[str, Any] | None) -> dict[str, tuple[str, str]]:
        if not cost:
            return {}
        found = {"environment": (cost["environment"]["minPerHour"], cost["environment"]["maxPerHour"])}
        found.update({f"tenant {row['tenant']}": (row["minPerHour"], row["maxPerHour"]) for row in cost["tenants"]})
        if "platform" in cost:
            found["platform (system node group)"] = (cost["platform"]["minPerHour"], cost["platform"]["maxPerHour"])
        found["unallocated"] = (cost["unallocated"]["minPerHour"], cost["unallocated"]["maxPerHour"])
        return found

    now, before = rows(current), rows(previous)

    def shown(name: str, index: int) -> str:
        value = now[name][index] if name in now else "-"
        was = before[name][index] if name in before else ("-" if previous else None)
        return value if was is None or was == value else f"{was} → {value}"

    names = [*now, *(name for name in before if name not in now)]
    table = ["| | per hour at min scale | per hour at max scale |", "|---|---:|---:|"]
    table += [f"| {name} | {shown(name, 0)} | {shown(name, 1)} |" for name in names]
    table += [
        "",
        "| pool | instance type | price per node-hour | price from | nodes at min | nodes at max |",
        "|---|---|---:|---|---:|---:|",
    ]
    table += [
        f"| {p['pool']} | {p['instanceType']} | {p['pricePerHour'] or 'no price'} | {_price_from(p)} | "
        f"{p['nodes']['min']} | {p['nodes']['max']} |"
        for p in current["pools"]
    ]
    notes = [
        "Prices are per hour in USD: a pool's `pricePerHour` where the stack gives one (its own rate), else the AWS list "
        "price of its instance type. A tenant is charged the GPUs its pods hold (a model version's replicas at its minimum "
        "and maximum, a batch job's parallel shards at maximum unless it is paused), the system node group is the "
        "platform's, and what no tenant holds is unallocated."
    ]
    if current.get("priceList"):
        notes.append(f"List prices: {current['priceList']}.")
    unpriced = [u if isinstance(u, str) else f"{u['pool']} ({u['reason']})" for u in current.get("unpriced", [])]
    if unpriced:
        notes.append(f"Not priced: {'; '.join(unpriced)}.")
    table += ["", " ".join(notes)]
    summary = f"environment {shown('environment', 0)} per hour at min scale, {shown('environment', 1)} at max"
    lines = [f"{name:<30} {shown(name, 0):>20} {shown(name, 1):>20}" for name in names]
    headline = "\n".join(table[: 2 + len(names)])
    return Section(
        "Cost",
        summary,
        data={"current": current, "previous": previous},
        markdown="\n".join(table),
        lines=lines,
        headline=headline,
    )
