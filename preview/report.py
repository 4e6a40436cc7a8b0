"""The preview report: report.json, report.md and the terminal summary.

Stages add sections (capacity, schemas, policies); a section with `failed: true` makes the
preview exit non-zero. The resource tree and counts come from the recorded registrations.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .engine import RecordedResource

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# How many lines of a failed stage's findings the top of report.md shows (the whole report has them all).
FINDING_LINES_SHOWN = 15


def shown_path(path: Path | str) -> str:
    """A path as the report shows it: relative to the project (`../shared/...`, `build/...`), never the
    machine's absolute one, which says nothing in a pull request's comment."""
    return os.path.relpath(os.path.abspath(path), PROJECT_ROOT)


# An absolute path in a message: a "/" that follows no word, dot, colon or slash (so not a URL's or a
# quantity's), up to the next space, quote or colon.
_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/])/[^\s:'\"`]+")


def shown_paths(text: str) -> str:
    """A message with every absolute path of this machine (one that exists: a config file given on the command
    line, say) shown as `shown_path` shows it; other slashes (an HTTP path, a key's value) stay as they were."""
    return _ABSOLUTE_PATH.sub(lambda m: shown_path(m[0]) if os.path.exists(m[0]) else m[0], text)


@dataclass
class Section:
    title: str
    summary: str
    failed: bool = False
    # Not a failure, but something to act on before `pulumi up` (shown as a warning).
    warning: bool = False
    # Machine-readable content for report.json.
    data: Any = None
    # Markdown body for report.md (tables, lists).
    markdown: str = ""
    # Lines for the terminal, under the section's summary.
    lines: list[str] = field(default_factory=list)
    # Markdown for the top of report.md (a pull request's comment), above the collapsed whole report:
    # what a reviewer reads first (the changes, the cost).
    headline: str = ""


@dataclass
class Report:
    project: str
    stack: str
    resources: list[RecordedResource]
    stack_outputs: dict[str, Any]
    stages: list[dict[str, Any]] = field(default_factory=list)
    # CPU seconds per process: this one's ("preview"), the program's ("program": the process it is evaluated in), the
    # policy pack's ("policyPack") and its client's ("policyClient"), each from its start.
    cpu: dict[str, float] = field(default_factory=dict)
    sections: dict[str, Section] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return any(s.failed for s in self.sections.values())

    def counts(self) -> dict[str, int]:
        custom = [r for r in self.resources if r.custom]
        return {
            "resources": len(self.resources),
            "custom": len(custom),
            "components": len(self.resources) - len(custom),
            "kubernetesObjects": sum(1 for r in custom if r.type.startswith("kubernetes:") and "helm.sh" not in r.type),
            "helmReleases": sum(1 for r in custom if "helm.sh" in r.type),
            "aws": sum(1 for r in custom if r.type.startswith("aws:")),
        }

    def by_kind(self) -> dict[str, int]:
        return dict(sorted(Counter(r.type for r in self.resources if r.custom).items()))

    def by_component(self) -> list[dict[str, Any]]:
        children: dict[str, Counter] = {}
        for r in self.resources:
            if r.custom and r.parent:
                children.setdefault(r.parent, Counter())[r.type] += 1
        rows = []
        for r in self.resources:
            if r.custom:
                continue
            kinds = children.get(r.urn, Counter())
            rows.append(
                {
                    "urn": r.urn,
                    "type": r.type,
                    "name": r.name,
                    "resources": sum(kinds.values()),
                    "byKind": dict(sorted(kinds.items())),
                }
            )
        return rows

    def to_json(self) -> dict[str, Any]:
        return {
            "project": self.project,
            "stack": self.stack,
            "status": "failed" if self.failed else "clean",
            "counts": self.counts(),
            "byKind": self.by_kind(),
            "byComponent": self.by_component(),
            "stackOutputs": self.stack_outputs,
            "stages": self.stages,
            "cpuSeconds": self.cpu,
            **{key: {"summary": s.summary, "failed": s.failed, "data": s.data} for key, s in self.sections.items()},
        }

    # --- rendering --------------------------------------------------------------------------

    def tree_lines(self) -> list[str]:
        """Components as a tree, each with the custom resources it registered directly."""
        by_parent: dict[str | None, list[RecordedResource]] = {}
        for r in self.resources:
            by_parent.setdefault(r.parent, []).append(r)
        component_rows = {row["urn"]: row for row in self.by_component()}
        lines: list[str] = []

        def walk(urn: str | None, prefix: str) -> None:
            components = sorted((r for r in by_parent.get(urn, []) if not r.custom), key=lambda r: (r.type, r.name))
            for index, r in enumerate(components):
                last = index == len(components) - 1
                row = component_rows[r.urn]
                kinds = ", ".join(f"{n} {short_type(t)}" for t, n in row["byKind"].items())
                lines.append(f"{prefix}{'└─ ' if last else '├─ '}{r.name} ({r.type}){': ' + kinds if kinds else ''}")
                walk(r.urn, prefix + ("   " if last else "│  "))

        roots = [r for r in self.resources if r.parent is None and not r.custom]
        for root in roots:
            row = component_rows[root.urn]
            kinds = ", ".join(f"{n} {short_type(t)}" for t, n in row["byKind"].items())
            lines.append(f"{root.name} ({root.type}){': ' + kinds if kinds else ''}")
            walk(root.urn, "")
        return lines

    def terminal(self) -> str:
        counts = self.counts()
        out = [f"Offline preview of stack '{self.stack}' ({self.project})", ""]
        out.extend(self.tree_lines())
        out.append("")
        out.append(
            f"{counts['resources']} resources: {counts['components']} components, {counts['kubernetesObjects']} Kubernetes "
            "objects, "
            f"{counts['helmReleases']} Helm releases, {counts['aws']} AWS resources"
        )
        for section in self.sections.values():
            mark = "FAIL" if section.failed else "warn" if section.warning else "ok  "
            out.append(f"{mark} {section.title}: {section.summary}")
            out.extend(f"     {line}" for line in section.lines)
        out.append("")
        out.append(f"result: {'FAILED' if self.failed else 'clean'}")
        return "\n".join(out)

    def markdown(self) -> str:
        """report.md, a pull request's comment: the verdict, each stage's one line, the findings, the changes and
        the cost; then the whole report, collapsed."""
        counts = self.counts()
        out = [
            f"# Offline preview: `{self.stack}`",
            "",
            f"**Result: {'FAILED' if self.failed else 'clean'}** — {counts['resources']} resources "
            f"({counts['components']} components, {counts['kubernetesObjects']} Kubernetes objects, "
            f"{counts['helmReleases']} Helm releases, {counts['aws']} AWS resources)",
            "",
        ]
        for section in self.sections.values():
            mark = "❌" if section.failed else "⚠️" if section.warning else "✅"
            out.append(f"- {mark} **{section.title}**: {section.summary}")
        failed = [s for s in self.sections.values() if s.failed]
        if failed:
            out += ["", "## Findings", ""]
            for section in failed:
                shown = section.lines[:FINDING_LINES_SHOWN]
                more = len(section.lines) - len(shown)
                out += [f"**{section.title}**", "", "```", *shown, *([f"... and {more} more"] if more else []), "```", ""]
        for section in self.sections.values():
            if section.headline:
                out += ["", f"## {section.title}", "", section.summary, "", section.headline.rstrip()]
        out += ["", "<details>", "<summary>The whole report: resources, every stage's tables, timings</summary>", ""]
        out += ["## Resources by kind", "", "| kind | count |", "|---|---:|"]
        out += [f"| `{kind}` | {n} |" for kind, n in self.by_kind().items()]
        out += ["", "## Resources by component", "", "```", *self.tree_lines(), "```", ""]
        for section in self.sections.values():
            if section.markdown:
                out += [f"## {section.title}", "", section.markdown.rstrip(), ""]
        out += ["## Stages", "", "| stage | seconds |", "|---|---:|"]
        out += [f"| {s['name']} | {s['seconds']:.2f} |" for s in self.stages]
        out += ["", "</details>"]
        return "\n".join(out) + "\n"

    def write(self, out: Path) -> None:
        (out / "report.json").write_text(json.dumps(self.to_json(), indent=2, default=str) + "\n")
        (out / "report.md").write_text(self.markdown())


def short_type(token: str) -> str:
    """`kubernetes:apps/v1:Deployment` -> `Deployment`, `pulumi:providers:aws` -> `provider:aws`."""
    if token.startswith("pulumi:providers:"):
        return "provider:" + token.rsplit(":", 1)[-1]
    return token.rsplit(":", 1)[-1]
