"""Garbage-collector settings for a short batch process that builds one big object graph.

Evaluating a program under the mock engine allocates millions of long-lived objects (resources,
outputs, futures, protobuf messages) and frees almost none until the end. With CPython's default
thresholds (700, 10, 10) the collector keeps rescanning that growing graph: about 30% of the
evaluation's time, for next to nothing collected. Full collections stop here, young ones are rarer.

Even so, a young collection walks every container made since the last one and what each refers
to, and that walk slows as the heap grows: the collector's own time (gc.callbacks) was 17 s of a
73 s evaluation at 500 models and 38 s of 146 s at 1,000 (2026-12-07), and a threshold of a
million instead of 50,000 still left 7.5 s and 23 s. So the evaluation runs with the collector
paused (`collection_paused`): it makes no cyclic garbage once the SDK's check for unknowns makes
none (preview/engine.py `acyclic_unknown_checks`), and what it builds is then frozen, never walked
again. After it the rest of the preview collects less than 0.3 s in all at 500 models.
(Tuned for the generational collector of CPython 3.11 to 3.13, which this project's venv runs.)
"""

import contextlib
import gc
from collections.abc import Iterator

YOUNG_THRESHOLD = 50_000
MIDDLE_THRESHOLD = 50
OLD_THRESHOLD = 1_000


class _Batch:
    # Whether this process is a batch (tune_for_batch was called): it keeps what it builds to its end.
    tuned = False


def tune_for_batch() -> None:
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, OLD_THRESHOLD)
    _Batch.tuned = True


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """No automatic collection within: for work that makes no cyclic garbage, where every collection would walk
    objects that are all alive (the collector stays as it was found: a caller that had disabled it keeps it so).

    In a batch process what was built within is then frozen (`gc.freeze`, a list splice): the young generation
    would otherwise hold all of it, and the first allocation after would walk it all (3 s at 500 models) to find it
    alive; full collections never run there, so it is kept to the end either way. Elsewhere (the test suite) it
    stays collectable."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if _Batch.tuned:
            gc.freeze()
        if was_enabled:
            gc.enable()
