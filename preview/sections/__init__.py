"""The report's sections, one module per family: the tables the program exports (outputs.py), the preview's checks
(checks.py) and the changes against a baseline (changes.py)."""

from __future__ import annotations

from .changes import changes_section, changes_summary_markdown
from .checks import (
    admission_section,
    first_up_section,
    guard_rail_section,
    policy_section,
    schema_section,
    upstream_section,
)
from .outputs import (
    adapters_section,
    batch_queue_section,
    capacity_section,
    cold_start_section,
    cost_section,
    queue_bound_section,
    registry_section,
)

__all__ = [
    "adapters_section",
    "admission_section",
    "batch_queue_section",
    "capacity_section",
    "changes_section",
    "changes_summary_markdown",
    "cold_start_section",
    "cost_section",
    "first_up_section",
    "guard_rail_section",
    "policy_section",
    "queue_bound_section",
    "registry_section",
    "schema_section",
    "upstream_section",
]
