"""What the LoRA adapter tests share (tests/test_lora_adapters.py, tests/test_lora_adapter_config.py): where
prod's adapters' base and batch model are, the adapters' names, and the base's adapters in a raw stack."""

from __future__ import annotations

from typing import Any

BASE = 1  # prod's models[1]: llama-8b, the adapters' base
BATCH = 3  # prod's models[3]: llama-8b-batch, the base's batch model
SUPPORT, SQL = "llama-3.1-8b-support", "llama-3.1-8b-sql"


def adapters(raw: dict[str, Any]) -> list[dict[str, Any]]:
    return raw["models"][BASE]["adapters"]
