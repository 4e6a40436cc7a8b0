"""The report's section of what changes against a baseline preview, and the table a pull request's comment opens
with."""

from __future__ import annotations

import json
import re
from typing import Any

from ..diff import Diff
from ..report import Section, short_type


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
