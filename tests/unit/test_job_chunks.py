"""How a worker is handed its jobs (`harness.worker.job_chunks`): runs of `eval_head_sets`
decoding sets, the oracle grid's gold-only sets riding in place, so the prefill chain's sorted
order is kept and the decoding sets' rows are batched as without them."""

from __future__ import annotations

from locos_bench.harness.worker import Job, job_chunks
from locos_bench.run.keys import UnitKey


def _jobs(kinds: str) -> list[Job]:
    """`e` an evaluation, `g` a grid unit, in order."""
    return [Job(UnitKey.eval("t", "d", 0, n + 1) if kind == "e" else UnitKey.grid("t", "d", 0, n + 1), [])
            for n, kind in enumerate(kinds)]


def test_grid_units_ride_with_the_decoding_run_they_fall_in():
    assert job_chunks(_jobs("eeee"), 4) == [[0, 1, 2, 3]]
    assert job_chunks(_jobs("egeegeeeg"), 4) == [[0, 1, 2, 3, 4, 5], [6, 7, 8]]
    assert job_chunks(_jobs("gegggeeee"), 2) == [[0, 1, 2, 3, 4, 5], [6, 7], [8]]
    assert job_chunks(_jobs("eee"), 1) == [[0], [1], [2]]
    assert job_chunks([], 4) == []


def test_a_run_of_grid_units_is_cut_so_a_kill_loses_little():
    assert job_chunks(_jobs("g" * 10), 2) == [list(range(8)), [8, 9]]
    assert job_chunks(_jobs("e" + "g" * 8 + "e"), 2) == [list(range(8)), [8, 9]]
