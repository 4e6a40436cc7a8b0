"""What a registry reference resolved to, and the registry's words made safe to print: what the client, the
recording and the resolution share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..models import MlflowReference

# Registry answers quoted in an error message are cut to this many characters.
MAX_QUOTE = 300


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


def quote(text: str, secret: str | None = None) -> str:
    """A registry's words, safe to print: one line, bounded, and never the token even if a server echoes it."""
    if secret:
        text = text.replace(secret, "[secret]")
    text = "".join(c if c.isprintable() else " " for c in text).strip()
    return text if len(text) <= MAX_QUOTE else text[: MAX_QUOTE - 3] + "..."
