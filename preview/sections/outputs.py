"""Report sections of the tables the program exports as stack outputs: capacity, cold starts, LoRA adapters, queue
bounds, batch queues, the model registry's answers and cost."""

from __future__ import annotations

from typing import Any

from platform_config.cold_start import S3_STREAM

from ..report import Section


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
