"""Kubernetes resource quantities ("200Gi", "500m", "64"): parsed exactly for capacity sums, written back into
manifests, and shown to people in findings and reports, each form by one function here."""

from __future__ import annotations

import math
import re
from decimal import Decimal

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: dict[str, Decimal | int] = {
    "m": Decimal("0.001"),
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}
QUANTITY_PATTERN = r"(?P<number>[0-9]+(?:\.[0-9]+)?)(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?"
_QUANTITY = re.compile(QUANTITY_PATTERN)

QUANTITY_HELP = "a Kubernetes quantity such as '64', '500m', '200Gi' or '1.5Ti'"


def parse_quantity(text: str) -> Decimal:
    """The value of a quantity in base units (bytes, cores). Raises ValueError when malformed."""
    # fullmatch: `$` also matches before a trailing newline, and "32Gi\n" is no quantity.
    match = _QUANTITY.fullmatch(text)
    if not match:
        raise ValueError(f"{text!r} is not {QUANTITY_HELP}")
    number = Decimal(match["number"])
    suffix = match["suffix"] or ""
    factor = Decimal(_BINARY[suffix]) if suffix in _BINARY else Decimal(_DECIMAL[suffix])
    return number * factor


def exact_quantity(amount: Decimal) -> str:
    """An exact Kubernetes quantity: whole units, else milli-units (a node's allocatable)."""
    if amount == amount.to_integral_value():
        return f"{int(amount)}"
    return f"{int(amount * 1000)}m"


def milli_quantity(amount: Decimal) -> str:
    """An amount in milli-units, whole or not ("1000m"): how summed container requests are written."""
    return f"{int(amount * 1000)}m"


def binary_quantity(amount: Decimal) -> str:
    """A byte count as a quantity, in the largest binary unit that holds it exactly ("256Mi")."""
    for suffix, factor in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if amount >= factor and amount % factor == 0:
            return f"{int(amount // factor)}{suffix}"
    return str(int(amount))


def resource_quantity(resource: str, amount: Decimal) -> str:
    """An amount of a resource as a quota or queue states it: memory in Gi where whole (else bytes), CPU in cores
    where whole (else millicores), anything else in whole units."""
    if resource == "memory":
        gib = amount / 2**30
        return f"{gib.normalize():f}Gi" if gib == gib.to_integral_value() else f"{int(amount)}"
    if resource == "cpu":
        return f"{amount.normalize():f}" if amount == amount.to_integral_value() else f"{int(amount * 1000)}m"
    return f"{int(amount)}"


def gib_quantity(gib: int) -> str:
    """A whole number of GiB as a quantity ("40Gi")."""
    return f"{gib}Gi"


# --- for people: findings, reports and messages ----------------------------------------------------


def show_amount(resource: str, value: Decimal) -> str:
    """An amount of a resource exactly: memory in Gi, everything else as a plain number (capacity tables, quota
    findings)."""
    if resource == "memory":
        return f"{(value / 2**30).normalize():f}Gi"
    return f"{value.normalize():f}"


def show_rounded(resource: str, amount: Decimal) -> str:
    """An amount as the admission stage's findings show it: memory and disk in Gi to the hundredth, a fraction of a
    CPU in millicores."""
    if resource in ("memory", "ephemeral-storage"):
        return f"{(amount / 2**30).quantize(Decimal('0.01')).normalize():f}Gi"
    if resource == "cpu" and amount != amount.to_integral_value():
        return milli_quantity(amount)
    return f"{amount.normalize():f}"


def show_gib_above(value: int) -> str:
    """A byte count in Gi rounded up to the tenth (an estimate shown as at least what it needs)."""
    return f"{math.ceil(value / 2**30 * 10) / 10:g}Gi"


def show_gb(amount: Decimal) -> str:
    """A byte count in decimal gigabytes to the tenth ("141.7 GB"), as AWS states sizes and rates: a cold start's
    image and weights."""
    return f"{float(amount) / 1e9:.1f} GB"


def show_gb_per_second(rate: float) -> str:
    """A rate in bytes per second as decimal gigabytes per second, three figures ("2.72 GB/s"): a cold start's pull
    and download."""
    return f"{rate / 1e9:.3g} GB/s"
