"""The documentation holds together: the README is the user guide (what the project is and the two commands on its
first screen), every relative link in it and under docs/ reaches a file of the repository (and a heading of it, for
an anchor), and every alert's runbook the program renders is a heading of the design notes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted([README, *(ROOT / "docs").rglob("*.md")])
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`]*`")


def heading_anchors(markdown: Path) -> set[str]:
    """GitHub's anchors for a file's headings: lowercased, punctuation but hyphens dropped, spaces to hyphens."""
    anchors = set()
    for line in CODE_FENCE.sub("", markdown.read_text()).splitlines():
        if match := re.match(r"^#{1,6} (.+)$", line):
            slug = re.sub(r"[^\w\- ]", "", match[1].strip().lower()).replace(" ", "-")
            anchors.add(slug)
    return anchors


def relative_links(markdown: Path) -> list[str]:
    text = INLINE_CODE.sub("", CODE_FENCE.sub("", markdown.read_text()))
    return [target for target in LINK.findall(text) if not re.match(r"^[a-z]+:", target)]


@pytest.mark.parametrize("markdown", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_heading(markdown):
    broken = []
    for target in relative_links(markdown):
        path, _, anchor = target.partition("#")
        file = (markdown.parent / path).resolve() if path else markdown
        if not file.is_relative_to(ROOT) or not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in heading_anchors(file):
            broken.append(target)
    assert not broken, f"{markdown.relative_to(ROOT)}: {broken}"


def test_the_readme_first_screen_says_what_it_is_and_how_to_try_it():
    first_screen = "\n".join(README.read_text().splitlines()[:30])
    assert "governed LLM-inference platform on Kubernetes" in first_screen
    assert "make preview" in first_screen and "make test" in first_screen


def test_every_design_note_is_in_the_index():
    index = (ROOT / "docs" / "design" / "README.md").read_text()
    notes = {p.name for p in (ROOT / "docs" / "design").glob("*.md")} - {"README.md"}
    assert notes == {target for target in relative_links(ROOT / "docs" / "design" / "README.md") if "/" not in target}
    assert all(f"](docs/design/{note})" in README.read_text() for note in notes), "the README's index misses a note"
    assert index


def test_every_rendered_runbook_is_a_heading_of_the_docs(previews):
    runbooks = set()
    for run in previews.values():
        for rule in run.objects("PrometheusRule", "monitoring.coreos.com/v1"):
            for group in rule["spec"]["groups"]:
                runbooks |= {r["annotations"]["runbook_url"] for r in group["rules"] if "runbook_url" in r.get("annotations", {})}
    assert runbooks, "no alert carries a runbook"
    for runbook in sorted(runbooks):
        path, _, anchor = runbook.partition("#")
        assert (ROOT / path).is_file() and anchor in heading_anchors(ROOT / path), runbook
