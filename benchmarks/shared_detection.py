"""Shared detection work (issue #38): the default run's detect phase with and without
`models.shared_passes`, measured side by side in one process.

Each retrieval task's calibration split (the default preset's: 8 examples) is scored by every
detector of the default run, once with each detector alone and once inside one `sharing`
block per task (what the harness's worker does), alternately `--repeats` times; the faster
of each is kept. Printed: per detector, its wall seconds alone, its own wall seconds sharing,
and the seconds it reports sharing (its own plus what it borrowed: what the harness records,
which should be near its alone figure); then the totals, their ratio, the passes lent and
the memory kept. Scores are checked to be identical.

    python benchmarks/shared_detection.py                    # gemma3, the default preset
    python benchmarks/shared_detection.py --model planted --repeats 1
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import _cpu  # noqa: E402  (the machine)

from locos_bench.detectors import make_detector, run_detector  # noqa: E402
from locos_bench.models import load_model, shared_passes  # noqa: E402
from locos_bench.run import RunConfig  # noqa: E402
from locos_bench.run.splits import build_task_data  # noqa: E402
from locos_bench.tasks import load_task  # noqa: E402


def calibration(model: Any, cfg: Any) -> dict[str, list[Any]]:
    """Each retrieval task's calibration split, as the run draws it."""
    out = {}
    for task in cfg.tasks:
        spec = load_task(task)
        if spec.kind == "retrieval":
            out[task] = list(build_task_data(spec, cfg, model).calibration_draw(0))
    return out


def score_all(model: Any, splits: dict[str, list[Any]], detectors: list[str], share: bool) -> dict[str, Any]:
    """Every detector on every task, in the harness's order (task by task); per detector its
    wall seconds, reported seconds and scores; with `share`, one memo per task."""
    out: dict[str, Any] = {d: {"wall": 0.0, "reported": 0.0, "scores": []} for d in detectors}
    memo = shared_passes.PassMemo(max_bytes=2 * 1024 ** 3)
    out["_memo"] = {"hits": 0, "misses": 0, "peak_mib": 0.0}
    for examples in splits.values():
        memo.clear()
        for name in detectors:
            start = time.perf_counter()
            if share:
                with shared_passes.sharing(memo):
                    result = run_detector(make_detector(name), model, examples, rng=np.random.default_rng(0))
            else:
                result = run_detector(make_detector(name), model, examples, rng=np.random.default_rng(0))
            out[name]["wall"] += time.perf_counter() - start
            out[name]["reported"] += result.seconds
            out[name]["scores"].append(result.scores)
            out["_memo"]["peak_mib"] = max(out["_memo"]["peak_mib"], memo.bytes / 2 ** 20)
    out["_memo"].update(hits=memo.hits, misses=memo.misses)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gemma3")
    parser.add_argument("--repeats", type=int, default=2, help="alternate runs of each side, the faster kept (default 2)")
    args = parser.parse_args(argv)
    model = load_model(args.model)
    cfg = RunConfig(model=model.name).resolved().for_model(model)
    detectors = [d for d in cfg.detectors if d != "random"]
    splits = calibration(model, cfg)
    best: dict[bool, dict[str, Any]] = {}
    for _ in range(args.repeats):
        for share in (False, True):
            run = score_all(model, splits, detectors, share)
            total = sum(run[d]["wall"] for d in detectors)
            if share not in best or total < sum(best[share][d]["wall"] for d in detectors):
                best[share] = run
    alone, shared = best[False], best[True]
    same = all(torch.equal(a, b) for d in detectors for a, b in zip(alone[d]["scores"], shared[d]["scores"]))
    lines = [f"Shared detection: `{model.name}`, the default preset's detectors on "
             f"{', '.join(f'{t} ({len(x)} examples)' for t, x in splits.items())}; {_cpu()}, "
             f"{torch.get_num_threads()} torch threads; faster of {args.repeats}.", "",
             "| detector | alone s | sharing: own s | sharing: reported s |", "|---|---|---|---|"]
    for d in detectors:
        lines.append(f"| {d} | {alone[d]['wall']:.1f} | {shared[d]['wall']:.1f} | {shared[d]['reported']:.1f} |")
    ta, ts = (sum(r[d]["wall"] for d in detectors) for r in (alone, shared))
    tr = sum(shared[d]["reported"] for d in detectors)
    lines += [f"| **all** | **{ta:.1f}** | **{ts:.1f}** | **{tr:.1f}** |", "",
              f"- sharing / alone: {ts / ta:.3f} (saved {ta - ts:.1f} s)",
              f"- reported sharing / alone: {tr / ta:.3f} (each detector's cost stays its own)",
              f"- passes lent: {shared['_memo']['hits']}, computed and offered: {shared['_memo']['misses']}, "
              f"most kept at once: {shared['_memo']['peak_mib']:.0f} MiB",
              f"- scores identical: {same}"]
    print("\n".join(lines))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
