"""The example values a stack file copied from this repository still holds: what docs/deploy.md says
to replace before a first `pulumi up` (the committed stacks name an example account, subnets, route
tables and `example.com` hosts). The preview lists each one by key, as a warning: an offline
preview of an example is fine, a `pulumi up` of one fails on the first AWS call or serves nobody."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from .report import Section

# What marks a value as the repository's example, and what to put there instead.
EXAMPLES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b123456789012\b"), "your AWS account's ID"),
    (re.compile(r"\bsubnet-0(?:f1e2d3c4b5a6|a1b2c3d4e5f6)\w*"), "your VPC's private subnets"),
    (re.compile(r"\brtb-0a1b2c3d4e5f6\w*"), "your VPC's private route tables"),
    # RFC 5737's documentation ranges.
    (re.compile(r"^(?:192\.0\.2|198\.51\.100|203\.0\.113)\.\d+(?:/\d+)?$"), "your own addresses"),
    (re.compile(r"(?:^|[./@])example\.(?:com|org|net)\b"), "your own domain"),
)


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _strings(inner, f"{path}.{key}")
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _strings(inner, f"{path}[{index}]")
    elif isinstance(value, str):
        yield path, value


def example_values(values: dict[str, str], secret_keys: list[str]) -> list[dict[str, str]]:
    """Each (key, value, what to put there) still the repository's example, in the stack's own key order; secrets
    are never read."""
    found = []
    for key, text in values.items():
        if key in secret_keys:
            continue
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        for path, string in _strings(value, key):
            for pattern, instead in EXAMPLES:
                if pattern.search(string):
                    found.append({"key": path, "value": string, "replaceWith": instead})
                    break
    return found


def placeholder_section(values: dict[str, str], secret_keys: list[str]) -> Section:
    found = example_values(values, secret_keys)
    if not found:
        return Section("Placeholders", "none of the repository's example values", data={"examples": []})
    lines = [f"{f['key']}: {f['value']} (replace with {f['replaceWith']})" for f in found]
    return Section(
        "Placeholders",
        f"{len(found)} example value(s) to replace before `pulumi up` (docs/deploy.md); an offline preview of them is fine",
        warning=True,
        data={"examples": found},
        markdown="\n".join(f"- `{f['key']}`: `{f['value']}`: {f['replaceWith']}" for f in found),
        lines=lines,
    )
