"""One rule of Kubernetes' set-based selectors: what In, NotIn, Exists and DoesNotExist ask of a value
(apimachinery pkg/labels/selector.go Requirement.Matches), for label selectors and a quota's scope
selector alike."""

from __future__ import annotations

from collections.abc import Collection


def requirement_holds(operator: str, present: bool, value: str | None, values: Collection[str]) -> bool | None:
    """Whether a requirement holds for a key that is `present` with `value`; None for an operator it does not
    know (each caller says what that means: the API server refuses such a selector)."""
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not (present and value in values)
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    return None
