"""worker.collector.rare_collections: the collector's settings while jobs run, and after."""

from __future__ import annotations

import gc
import threading
import weakref

from compactor.worker.collector import YOUNG_THRESHOLD, rare_collections


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_settings_hold_while_a_job_runs_and_are_restored_after() -> None:
    before = gc.get_threshold()
    frozen = gc.get_freeze_count()
    with rare_collections():
        assert gc.get_threshold() == (YOUNG_THRESHOLD, before[1], before[2])
        assert gc.get_freeze_count() > frozen
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_the_last_of_several_jobs_restores_them() -> None:
    before = gc.get_threshold()
    inside, release = threading.Event(), threading.Event()

    def other_job() -> None:
        with rare_collections():
            inside.set()
            release.wait(10)

    t = threading.Thread(target=other_job)
    t.start()
    assert inside.wait(10)
    with rare_collections():
        pass
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD  # the other job still runs
    release.set()
    t.join()
    assert gc.get_threshold() == before


def test_cycles_made_during_a_job_are_still_collected() -> None:
    with rare_collections():
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
        del a, b
        assert gone() is not None
        gc.collect()
        assert gone() is None


def test_what_another_part_of_the_process_froze_stays_frozen() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with rare_collections():
            pass
        assert gc.get_freeze_count() >= frozen
    finally:
        gc.unfreeze()
