"""Which part of LOCOS matters: each of the six differences toggled alone from the authors' score.

`locos` is the authors' score; each variant changes one of its six parameters to the reading
this project used first (`locos-teacher-forced`, which changes all six, is the last row). Per
model and task, on the default preset's calibration examples (the first 8 of each task), it
prints each variant's agreement with `locos` on the top heads: overlap of the top 8, Spearman
over every head's score, the heads that enter and leave the top 4 and, on a planted model,
precision@2 against the known retrieval heads. One JSON line per model and task, then a
Markdown table (`docs/which-part-of-locos-matters.md` quotes it).

    python scripts/locos_parts.py [--models planted,planted-nonliteral,gemma3] [--n 8] [--tasks kv-retrieval]

Each trial is decoded once and shared by the variants (the decoding does not depend on them).
"""

from __future__ import annotations

import argparse
import functools
import json
import time

import numpy as np
from scipy.stats import spearmanr

from locos_bench.detectors import locos as locos_module
from locos_bench.detectors import make_detector, run_detector
from locos_bench.models import load_model
from locos_bench.models.planted import PLANTED_TASKS, planted_ground_truth
from locos_bench.names import head_name
from locos_bench.tasks import load_task, make_examples

FIRST = {"decoding": "teacher-forced", "gate": False, "direction": "folded", "post_norm": "linearised",
         "off_needle": "context", "contrast": "mean"}
"""The project's first reading of each part (`locos-teacher-forced`'s defaults)."""
VARIANTS = {"locos (the authors')": {}, **{f"{key}={value}".replace("True", "true").replace("False", "false"):
                                           {key: value} for key, value in FIRST.items()},
            "all six (locos-teacher-forced)": FIRST}
REAL_TASKS = ["kv-retrieval", "niah-literal"]


def share_trials() -> None:
    """Decode each example once per process: every variant reads the same trial."""
    memo: dict = {}
    real = locos_module.run_trial

    @functools.wraps(real)
    def cached(model, t, **kwargs):
        key = (id(model), tuple(t.input_ids[:t.prompt_len]), tuple(t.example.answers), tuple(sorted(kwargs.items())))
        if key not in memo:
            memo[key] = real(model, t, **kwargs)
        return memo[key]

    locos_module.run_trial = cached


def compare(results: dict, truth: set | None) -> dict:
    base = results["locos (the authors')"]
    top8, top4 = set(base.ranking()[:8]), set(base.ranking()[:4])
    rows = {}
    for label, res in results.items():
        ranking = res.ranking()
        rho = spearmanr(base.scores.flatten().numpy(), res.scores.flatten().numpy()).statistic
        rows[label] = {
            "top8_overlap": len(top8 & set(ranking[:8])),
            "spearman": round(float(rho), 3),
            "enter_top4": [head_name(h) for h in ranking[:4] if h not in top4],
            "leave_top4": [head_name(h) for h in base.ranking()[:4] if h not in set(ranking[:4])],
            "top4": [head_name(h) for h in ranking[:4]],
            "trials": int(res.per_example.shape[0]),
            "seconds": round(res.seconds, 1),
        }
        if truth:
            rows[label]["precision@2"] = len(set(ranking[:2]) & truth) / 2
    return rows


def table(records: list[dict]) -> str:
    truth = any("precision@2" in row for rec in records for row in rec["variants"].values())
    head = ["model", "task", "variant", "top-8 overlap", "Spearman", "enter top 4", "leave top 4", "trials"]
    head += ["precision@2"] if truth else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for rec in records:
        for label, row in rec["variants"].items():
            cells = [rec["model"], rec["task"], f"`{label}`", f"{row['top8_overlap']}/8", f"{row['spearman']:.3f}",
                     " ".join(row["enter_top4"]) or "-", " ".join(row["leave_top4"]) or "-", str(row["trials"])]
            if truth:
                cells.append(f"{row['precision@2']:.1f}" if "precision@2" in row else "")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="planted,planted-nonliteral,gemma3")
    parser.add_argument("--n", type=int, default=8, help="calibration examples per task (default 8)")
    parser.add_argument("--tasks", default=",".join(REAL_TASKS),
                        help="the real models' tasks (default kv-retrieval,niah-literal)")
    args = parser.parse_args()
    share_trials()
    records = []
    for alias in args.models.split(","):
        model = load_model(alias)
        planted = alias in PLANTED_TASKS
        truth = ({tuple(h) for h in planted_ground_truth(alias)["ground_truth"]["retrieval"]} if planted else None)
        for task in [PLANTED_TASKS[alias]] if planted else args.tasks.split(","):
            examples = make_examples(load_task(task), args.n, model=model)
            start = time.perf_counter()
            results = {label: run_detector(make_detector("locos", **params), model, examples,
                                           rng=np.random.default_rng(0))
                       for label, params in VARIANTS.items()}
            record = {"model": alias, "task": task, "examples": len(examples),
                      "seconds": round(time.perf_counter() - start, 1), "variants": compare(results, truth)}
            records.append(record)
            print(json.dumps(record), flush=True)
    print()
    print(table(records))


if __name__ == "__main__":
    main()
