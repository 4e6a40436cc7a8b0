"""What a registry reference resolved to, and the registry's words made safe to print: what the client, the
recording and the resolution share."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..models import S3_URI_PATTERN, MlflowReference, ModelSource

# Registry answers quoted in an error message are cut to this many characters.
MAX_QUOTE = 300

_HF_PINNED = re.compile(r"hf://(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)@(?P<revision>[0-9a-f]{40})")
_S3 = re.compile(S3_URI_PATTERN.removeprefix("^").removesuffix("$"))
PINNED_FORMS = "hf://org/name@<40-character commit SHA> or s3://bucket/prefix/<version folder>"


@dataclass(frozen=True)
class RegistryEntry:
    """What one registry reference resolved to."""

    registered_model: str
    # The reference as the stack gives it: an alias or a version number.
    alias: str | None
    requested_version: int | None
    # The version the registry named (for a version reference, the same number).
    registry_version: str
    weights: str

    @property
    def reference(self) -> tuple[str, str | None, int | None]:
        return (self.registered_model, self.alias, self.requested_version)

    def to_json(self) -> dict[str, Any]:
        asked: dict[str, Any] = {"alias": self.alias} if self.alias is not None else {"version": self.requested_version}
        return {
            "registeredModel": self.registered_model,
            **asked,
            "registryVersion": self.registry_version,
            "weights": self.weights,
        }


def reference_of(reference: MlflowReference) -> tuple[str, str | None, int | None]:
    return (reference.model, reference.alias, reference.version)


def describe_reference(reference: MlflowReference) -> str:
    asked = f"alias {reference.alias!r}" if reference.alias is not None else f"version {reference.version}"
    return f"registered model {reference.model!r}, {asked}"


def pinned_source(weights: str) -> ModelSource | None:
    """The concrete source of a pinned weights location; None when it is not pinned."""
    hf = _HF_PINNED.fullmatch(weights)
    if hf is not None:
        return ModelSource(huggingface=hf["repo"], revision=hf["revision"])
    if _S3.fullmatch(weights):
        prefix, _, folder = weights.rstrip("/").rpartition("/")
        if prefix.count("/") >= 2 and folder:  # `s3://bucket/<folder>` at least
            return ModelSource(s3_uri=prefix, revision=folder)
    return None


def quote(text: str, secret: str | None = None) -> str:
    """A registry's words, safe to print: one line, bounded, and never the token even if a server echoes it."""
    if secret:
        text = text.replace(secret, "[secret]")
    text = "".join(c if c.isprintable() else " " for c in text).strip()
    return text if len(text) <= MAX_QUOTE else text[: MAX_QUOTE - 3] + "..."
