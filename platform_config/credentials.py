"""What a credential looks like in clear: the token formats of the services a platform team holds
keys for, by the prefixes their issuers document. The stack file must never hold one outside the
secret keys, the policy pack refuses one in a command line or a chart's values, and the preview
masks one in every message (the pack reads these formats from its generated facts)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

# Each issuer's documented prefix and the token's alphabet. Word boundaries keep a longer name
# that merely contains a prefix (a path `.../hf_cache`, a model `task-...`) from matching.
CREDENTIAL_FORMATS: dict[str, str] = {
    "Hugging Face token": r"\bhf_[A-Za-z0-9]{20,}\b",
    "AWS access key ID": r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    "GitHub token": r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})\b",
    "Slack token": r"\bxox[abprs]-[A-Za-z0-9-]{10,}",
    "OpenAI API key": r"\bsk-(?:proj-)?[A-Za-z0-9_-]{32,}",
    "Google API key": r"\bAIza[0-9A-Za-z_-]{35}\b",
    "private key": r"-----BEGIN (?:[A-Z]+ )*PRIVATE KEY-----",
    "JSON Web Token": r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
}
_COMPILED = {name: re.compile(pattern) for name, pattern in CREDENTIAL_FORMATS.items()}
ANY_CREDENTIAL = re.compile("|".join(f"(?:{pattern})" for pattern in CREDENTIAL_FORMATS.values()))


def credential_format(text: str) -> str | None:
    """The name of the first credential format `text` holds, or None."""
    return next((name for name, pattern in _COMPILED.items() if pattern.search(text)), None)


def credentials_in(value: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """(path, format) of every string in a nested config value that holds a credential."""
    if isinstance(value, str):
        found = credential_format(value)
        if found is not None:
            yield path, found
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from credentials_in(item, (*path, str(key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from credentials_in(item, (*path, index))
