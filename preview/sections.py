"""Report sections built from what the program exported."""

from __future__ import annotations

from typing import Any

from .report import Section


def capacity_section(stack_outputs: dict[str, Any]) -> Section:
    """The capacity table the program exports as `gpuCapacity` (quotas against pool supply)."""
    rows = stack_outputs.get("gpuCapacity") or []
    if not rows:
        return Section("Capacity", "no capacity table exported", data=[])
    over = [r for r in rows if not r["withinCapacity"]]
    lines, table = [], ["| resource | kind | pools supply (at maxSize) | tenant quotas | used |", "|---|---|---|---|---:|"]
    for row in rows:
        supply = ", ".join(f"{p} {v}" for p, v in row["supplyByPool"].items()) or "-"
        demand = ", ".join(f"{t} {v}" for t, v in row["demandByTenant"].items()) or "-"
        used = f"{row['utilisationPercent']}%" if row["utilisationPercent"] is not None else "-"
        table.append(f"| `{row['resource']}` | {row['kind']} | {row['supply']} ({supply}) | {row['demand']} ({demand}) | {used} |")
        lines.append(f"{row['resource']:<26} supply {row['supply']:>8}  quotas {row['demand']:>8}  {used:>5}  {row['kind']}")
    summary = (
        f"{len(rows)} resource kinds, all quotas within pool capacity"
        if not over
        else f"{len(over)} resource kinds over capacity"
    )
    return Section("Capacity", summary, failed=bool(over), data=rows, markdown="\n".join(table), lines=lines)
