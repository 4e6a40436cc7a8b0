"""The pack decodes each resource once per analyzer request (policies/inference_governance/decoding.py), with the
verdicts the policy SDK's own decoding (once per policy) gives: both, side by side, over every committed stack and
over a stack changed to break many rules at once."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from preview.engine import RecordedResource
from preview.performance import preview_policy_config
from preview.policy_runner import PolicyPack
from preview.stack_config import load_project, load_stack_config

from .helpers import IMAGES_BY_TAG, ROOT, Evaluated, prod_with_labeller_server, raw_stack
from .policy_helpers import _careless


def _running(stack: str, decode_each: bool) -> PolicyPack:
    config = load_stack_config(load_project(ROOT), stack)
    saved = os.environ.get("POLICY_PACK_DECODE_EACH")
    os.environ["POLICY_PACK_DECODE_EACH"] = "1" if decode_each else "0"
    try:
        running = PolicyPack(ROOT / "policies", config.values, "inference-platform", stack).connect()
    finally:
        if saved is None:
            os.environ.pop("POLICY_PACK_DECODE_EACH")
        else:
            os.environ["POLICY_PACK_DECODE_EACH"] = saved
    running.handshake(ROOT)
    running.configure_stack("inference-platform", stack, config.values, config.secret_keys)
    running.configure(running.info(), preview_policy_config(IMAGES_BY_TAG))
    return running


def _verdicts(pack: PolicyPack, records: list[RecordedResource]) -> Iterator[tuple[str, str, str, str]]:
    providers = {r.urn: r for r in records if r.type.startswith("pulumi:providers:")}
    for record in records:
        if record.custom and not record.type.startswith("pulumi:providers:"):
            provider = providers.get((record.provider or "").rsplit("::", 1)[0])
            for d in pack.analyze(record, provider):
                yield ("resource", d.policy, d.urn, d.message)
    for d in pack.analyze_stack(r for r in records if not r.type.startswith("pulumi:providers:")):
        yield ("stack", d.policy, d.urn, d.message)


@pytest.mark.parametrize("stack", ["dev", "staging", "prod", "prod-careless"])
def test_decoding_once_per_request_gives_the_sdks_verdicts(stack: str) -> None:
    name = stack.removesuffix("-careless")
    raw: Any = prod_with_labeller_server() if stack == "prod-careless" else raw_stack(name)
    records = Evaluated(raw, shared=True).records
    if stack == "prod-careless":
        records = _careless(records)
    once, each = _running(name, decode_each=False), _running(name, decode_each=True)
    try:
        found = sorted(_verdicts(once, records))
        assert found == sorted(_verdicts(each, records))
    finally:
        once.close()
        each.close()
    if stack == "prod-careless":
        assert len({policy for _, policy, _, _ in found}) >= 5, found
