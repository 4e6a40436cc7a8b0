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
# A list, not a mapping: the first format that matches names a value, in this order, in the
# program and in the pack alike (the pack's facts keep it). Where each issuer documents its form:
# - private key: RFC 7468 section 10 ("-----BEGIN PRIVATE KEY-----"; the RSA, EC and OPENSSH labels likewise);
# - Hugging Face: huggingface.co/docs/hub/security-tokens (user access tokens `hf_...`; `api_org_` the retired
#   organization tokens);
# - AWS: the STS API reference, GetAccessKeyInfo ("Access key IDs beginning with AKIA are long-term credentials ...
#   beginning with ASIA are temporary"), 20 characters;
# - GitHub: github.blog changelog 2021-03-31 "Authentication token format updates" (`ghp_`, `gho_`, `ghu_`, `ghs_`,
#   `ghr_`) and the fine-grained `github_pat_`;
# - GitLab: docs.gitlab.com, "Personal access token prefix" (`glpat-`);
# - npm: docs.npmjs.com/about-access-tokens and the GitHub changelog of npm's new token format (`npm_` and 36
#   letters and digits, a CRC32 in the last six);
# - Docker Hub: docs.docker.com, the Hub API's "Create access token" (`dckr_pat_...` personal access tokens);
# - Stripe: docs.stripe.com/keys (live secret keys `sk_live_`, restricted keys `rk_live_`; test keys move no money);
# - Slack: docs.slack.dev/authentication/tokens (bot `xoxb-`, user `xoxp-`, app-level `xapp-`, ...);
# - Anthropic: the Console's API keys (`sk-ant-api03-...`, admin keys `sk-ant-admin01-...`), before OpenAI's `sk-`;
# - OpenAI: platform.openai.com API keys (`sk-proj-...`, and the older `sk-...`);
# - Google: cloud.google.com/docs/authentication/api-keys (keys `AIza` and 35 more characters);
# - JWT: RFC 7519 (three base64url parts; a JSON header and payload begin `eyJ`).
CREDENTIAL_FORMATS: tuple[tuple[str, str], ...] = (
    # The whole block, so that masking one leaves none of the key.
    ("private key", r"-----BEGIN (?:[A-Z]+ )*PRIVATE KEY-----(?:[\s\S]*?-----END (?:[A-Z]+ )*PRIVATE KEY-----)?"),
    ("Hugging Face token", r"\b(?:hf_[A-Za-z0-9]{20,}|api_org_[A-Za-z0-9]{20,})\b"),
    ("AWS access key ID", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    ("GitHub token", r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})\b"),
    ("GitLab token", r"\bglpat-[A-Za-z0-9_-]{20,}"),
    ("npm token", r"\bnpm_[A-Za-z0-9]{36}\b"),
    ("Docker Hub token", r"\bdckr_pat_[A-Za-z0-9_-]{20,}"),
    ("Stripe live key", r"\b[rs]k_live_[A-Za-z0-9]{10,}"),
    ("Pulumi access token", r"\bpul-[a-f0-9]{40}\b"),
    ("Slack token", r"\b(?:xox[abeprs]|xapp)-[A-Za-z0-9-]{10,}"),
    ("Anthropic API key", r"\bsk-ant-[a-z]+[0-9]*-[A-Za-z0-9_-]{32,}"),
    ("OpenAI API key", r"\bsk-(?:proj-)?[A-Za-z0-9_-]{32,}"),
    # No closing boundary: a key may end in '-'.
    ("Google API key", r"\bAIza[0-9A-Za-z_-]{35}"),
    ("JSON Web Token", r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
)
_COMPILED = [(name, re.compile(pattern)) for name, pattern in CREDENTIAL_FORMATS]
ANY_CREDENTIAL = re.compile("|".join(f"(?:{pattern})" for _, pattern in CREDENTIAL_FORMATS))


def credential_format(text: str) -> str | None:
    """The name of the first credential format `text` holds, or None."""
    return next((name for name, pattern in _COMPILED if pattern.search(text)), None)


def credentials_in(value: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """(path, format) of every string in a nested config value that holds a credential, a mapping's
    keys included (a key of the path, the entry's own)."""
    if isinstance(value, str):
        found = credential_format(value)
        if found is not None:
            yield path, found
    elif isinstance(value, Mapping):
        for key, item in value.items():
            found = credential_format(str(key))
            if found is not None:
                # Named by its parent: the key itself is the secret.
                yield path, found
                continue
            yield from credentials_in(item, (*path, str(key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from credentials_in(item, (*path, index))
