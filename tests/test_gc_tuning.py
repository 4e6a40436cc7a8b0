"""The collector's settings for the preview's batch process (preview/gc_tuning.py)."""

from __future__ import annotations

import gc

import pytest

from preview import gc_tuning


@pytest.fixture
def batch(monkeypatch):
    monkeypatch.setattr(gc_tuning._Batch, "tuned", True)
    yield
    gc.unfreeze()


def _built_within() -> list[dict[str, int]]:
    with gc_tuning.collection_paused():
        assert not gc.isenabled()
        built = [{"n": n} for n in range(1000)]
    return built


def test_a_batch_process_keeps_what_was_built_while_paused_out_of_later_collections(batch):
    frozen = gc.get_freeze_count()
    built = _built_within()
    assert gc.isenabled()
    # Frozen (a list splice): the young generation no longer holds it, so no collection walks it again.
    assert gc.get_freeze_count() >= frozen + len(built)
    assert all(not any(item is o for o in gc.get_objects(generation=0)) for item in built[:3])


def test_elsewhere_what_was_built_while_paused_stays_collectable():
    assert not gc_tuning._Batch.tuned
    frozen = gc.get_freeze_count()
    _built_within()
    assert gc.get_freeze_count() == frozen
    assert gc.isenabled()


def test_a_collector_disabled_before_stays_disabled():
    gc.disable()
    try:
        with gc_tuning.collection_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
