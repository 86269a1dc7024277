"""Which part of LOCOS matters: each ablation of LOCOS ranks heads against LOCOS's own ranking.

Runs `locos`, `locos final_norm=False`, `dla` (no contrast) and `locos-argmax` (argmax source
of needle rows) on the first 8 examples of each task, and prints per model and task each
variant's top heads, its Jaccard index with `locos`'s and, on a planted model, its
precision@2 against the known retrieval heads. The README's *Which part of LOCOS matters*
table quotes it.

    .venv/bin/python scripts/locos_parts.py [--models planted,planted-nonliteral,gemma3]
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from locos_bench.detectors import make_detector, run_detector
from locos_bench.models import load_model
from locos_bench.models.planted import PLANTED_TASKS, planted_ground_truth
from locos_bench.names import head_name
from locos_bench.tasks import load_task, make_examples

VARIANTS = {
    "locos": ("locos", {}),
    "final_norm=False": ("locos", {"final_norm": False}),
    "dla": ("dla", {}),
    "locos-argmax": ("locos-argmax", {}),
}
REAL_TASKS = ["kv-retrieval", "niah-literal"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="planted,planted-nonliteral,gemma3")
    parser.add_argument("--n", type=int, default=8, help="calibration examples (default 8)")
    args = parser.parse_args()
    for alias in args.models.split(","):
        model = load_model(alias)
        planted = alias in PLANTED_TASKS
        k = 2 if planted else 8
        for task in [PLANTED_TASKS[alias]] if planted else REAL_TASKS:
            examples = make_examples(load_task(task), args.n, model=model)
            tops = {label: run_detector(make_detector(name, **params), model, examples,
                                        rng=np.random.default_rng(0)).ranking()[:k]
                    for label, (name, params) in VARIANTS.items()}
            row = {}
            for label, top in tops.items():
                ref = set(tops["locos"])
                row[label] = {"top": [head_name(h) for h in top],
                              f"jaccard@{k}": round(len(set(top) & ref) / len(set(top) | ref), 3)}
                if planted:
                    truth = {tuple(h) for h in planted_ground_truth(model.name)["ground_truth"]["retrieval"]}
                    row[label]["precision@2"] = len(set(top) & truth) / 2
            print(json.dumps({"model": alias, "task": task, "examples": len(examples), "variants": row}), flush=True)


if __name__ == "__main__":
    main()
