"""Secrets kept out of the report: the stack's secret values, credential-looking arguments and credentials of the
known formats, masked out of every message the policy pack sends."""

from __future__ import annotations

import json
import re
from typing import Any, Iterable

from platform_config.credentials import ANY_CREDENTIAL

MASK = "***"
# A flag (`--hf-token X`, `--api-key=X`) or an assignment (`token=X`) whose name says it carries
# a credential (whole words: --max-tokens is not one), and a credential of a known format anywhere.
_SECRET_WORD = r"(?:token|secret|password|passwd|api[-_]?key|access[-_]?key|private[-_]?key|credentials?)"
_SECRET_NAME = rf"(?:[A-Za-z0-9]+[-_])*{_SECRET_WORD}(?:[-_][A-Za-z0-9]+)*"
_SECRET_ARGUMENT = re.compile(
    rf"(?i)((?<![A-Za-z0-9-])-{{1,2}}{_SECRET_NAME}(?:=|\s+)|(?<![A-Za-z0-9_-]){_SECRET_NAME}=)(?!\*\*\*)([^\s,;&'\"()\[\]]+)"
)


def secret_values(config: dict[str, str], secret_keys: list[str]) -> list[str]:
    """The stack's secret config values as strings (an object's string leaves too), longest first."""
    found: set[str] = set()

    def leaves(value: Any) -> None:
        if isinstance(value, dict):
            for item in value.values():
                leaves(item)
        elif isinstance(value, list):
            for item in value:
                leaves(item)
        elif isinstance(value, str) and len(value) >= 4:
            found.add(value)

    for key in secret_keys:
        text = config.get(key)
        if text is None:
            continue
        leaves(text)
        try:
            leaves(json.loads(text))
        except ValueError:
            pass
    return sorted(found, key=len, reverse=True)


def mask_secrets(text: str, secrets: Iterable[str] = ()) -> str:
    """A message with the stack's secret values, credential-looking arguments (`--hf-token X`,
    `api_key=X`) and credentials of the known formats (platform_config/credentials.py) replaced by
    ***: whatever a policy quotes, a report never repeats a secret."""
    for secret in secrets:
        text = text.replace(secret, MASK)
    text = ANY_CREDENTIAL.sub(MASK, text)
    return _SECRET_ARGUMENT.sub(lambda m: m.group(1) + MASK, text)
