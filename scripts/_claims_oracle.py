"""The blocks of `docs/results/oracle-real-weights.md`: what each shipped oracle file of a real
model (`locos_bench/data/oracle/MODEL-ABLATION.json`, `scripts/oracle_search.py`) says, read
from the file alone (no run): per retrieval task, the single heads of largest drop and the
cross-fitted greedy sets' drop at each k, with 95% percentile intervals over the evaluation
examples (2,000 resamples, seeded per file and task).

The effect of a set is the unablated value minus the ablated one, per example (necessity), in
nats of the gold answer's log-prob and in the task's headline metric. A greedy set at k is read
on the half of the examples it was not chosen on (two folds), so the figure at k is the mean
over every example of the reads, without a winner's curse.
"""

from __future__ import annotations

import json
from functools import cache, partial
from pathlib import Path
from typing import Any

import numpy as np

from locos_bench.report.statistics.bootstrap import Bootstrap, Estimate, task_seed
from scripts._claims import PageError

ROOT = Path(__file__).resolve().parents[1]
ORACLE = ROOT / "locos_bench" / "data" / "oracle"
RESAMPLES = 2000
TOP = 5


@cache
def oracle_file(name: str) -> dict[str, Any]:
    path = ORACLE / f"{name}.json"
    if not path.is_file():
        raise PageError(f"no oracle file {path.relative_to(ROOT)}")
    return json.loads(path.read_text())


def _drops(result: dict[str, Any], values: dict[str, list[float]], figure: str) -> np.ndarray:
    return np.asarray(result["unablated"][figure], dtype=np.float64) - np.asarray(values[figure], dtype=np.float64)


def _est(boot: Bootstrap, x: np.ndarray, digits: int) -> str:
    e: Estimate = boot.estimate(x)
    return f"{e.value:.{digits}f} [{e.low:.{digits}f}, {e.high:.{digits}f}]"


def _boot(name: str, task: str, n: int) -> Bootstrap:
    return Bootstrap(n, n_resamples=RESAMPLES, seed=task_seed(0, f"oracle-page:{name}:{task}"))


def singles(get: Any, name: str) -> str:
    """Per task, the `TOP` heads of largest mean gold drop ablated alone, and how many of all
    the heads drop it by more than 0.1 nats."""
    data = oracle_file(name)
    lines = ["| task | head | gold drop (nats) | headline drop | heads over 0.1 nats |", "|---|---|---|---|---|"]
    for task, entry in data["tasks"].items():
        result = entry["result"]
        scan = result["necessity"]["singles"]
        n = len(result["unablated"]["gold"])
        boot = _boot(name, task, n)
        means = {h: float(_drops(result, v, "gold").mean()) for h, v in scan.items()}
        order = sorted(means, key=lambda h: (-means[h], h))
        over = sum(m > 0.1 for m in means.values())
        for i, head in enumerate(order[:TOP]):
            lines.append(f"| {task if i == 0 else ''} | {head} | {_est(boot, _drops(result, scan[head], 'gold'), 2)} | "
                         f"{_est(boot, _drops(result, scan[head], 'metric'), 2)} | "
                         f"{f'{over} of {len(scan)}' if i == 0 else ''} |")
    return "\n".join(lines)


def _chosen_rows(search: dict[str, Any], cells: Any) -> list[str]:
    """One row per k of a search's cross-fitted sets: `cells(values)` (its figures) and each
    fold's set."""
    rows = []
    for k in sorted(search["chosen"], key=int):
        paths = [fold["path"][int(k) - 1] for fold in search["folds"]]
        rows.append(f"{k} | {cells(search['chosen'][k])} | {paths[0]} | {paths[1]} |")
    return rows


def greedy(get: Any, name: str) -> str:
    """Per task and k, the cross-fitted greedy sets' drop and each fold's set."""
    data = oracle_file(name)
    lines = ["| task | k | gold drop (nats) | headline drop | fold 0's set | fold 1's set |", "|---|---|---|---|---|---|"]
    for task, entry in data["tasks"].items():
        result = entry["result"]
        search = result["necessity"]
        boot = _boot(name, task, len(result["unablated"]["gold"]))
        rows = _chosen_rows(search, lambda v, boot=boot, result=result: (
            f"{_est(boot, _drops(result, v, 'gold'), 2)} | {_est(boot, _drops(result, v, 'metric'), 2)}"))
        lines += [f"| {task if i == 0 else ''} | {row}" for i, row in enumerate(rows)]
    return "\n".join(lines)


def concentration(get: Any, name: str) -> str:
    """One line per task: how much of the largest k's cross-fitted gold drop the best single
    head (chosen the same way, cross-fitted) reaches, and the unablated values."""
    data = oracle_file(name)
    out = []
    for task, entry in data["tasks"].items():
        result = entry["result"]
        chosen = result["necessity"]["chosen"]
        top = max(chosen, key=int)
        one, most = (float(_drops(result, chosen[k], "gold").mean()) for k in ("1", top))
        base_gold = float(np.mean(result["unablated"]["gold"]))
        base_metric = float(np.mean(result["unablated"]["metric"]))
        out.append(f"- **{task}** (unablated: gold log-prob {base_gold:.2f} nats, headline {base_metric:.2f} on "
                   f"{len(result['unablated']['gold'])} examples): the cross-fitted best single head drops the gold "
                   f"log-prob by {one:.2f} nats, {one / most:.2f} of the {most:.2f} that k = {top} reaches.")
    return "\n".join(out)


def kept(get: Any, name: str) -> str:
    """A sufficiency file: per task, the unablated value and the floor (every head streaming),
    then at each k the value kept with only the cross-fitted greedy set full (gold log-prob in
    nats and the headline metric, each with its interval) and each fold's set."""
    data = oracle_file(name)
    streaming = data["streaming"]
    lines = [f"Every other head streams its first {streaming['kv_sink']} and last {streaming['kv_window']} tokens.",
             "", "| task | k | gold kept (nats) | headline kept | fold 0's set | fold 1's set |",
             "|---|---|---|---|---|---|"]
    for task, entry in data["tasks"].items():
        result = entry["result"]
        search = result["sufficiency"]
        boot = _boot(name, task, len(result["unablated"]["gold"]))
        for label, values in (("unablated", result["unablated"]), ("floor", search["floor"])):
            lines.append(f"| {task if label == 'unablated' else ''} | {label} | "
                         f"{_est(boot, np.asarray(values['gold'], dtype=np.float64), 2)} | "
                         f"{_est(boot, np.asarray(values['metric'], dtype=np.float64), 2)} | | |")
        lines += [f"| | {row}" for row in _chosen_rows(search, lambda v, boot=boot: (
            f"{_est(boot, np.asarray(v['gold'], dtype=np.float64), 2)} | "
            f"{_est(boot, np.asarray(v['metric'], dtype=np.float64), 2)}"))]
    return "\n".join(lines)


def _blocks(name: str) -> dict[str, tuple[str, Any]]:
    source = f"oracle/{name}.json"
    return {f"oracle:{name}:{part}": (source, partial(fn, name=name))
            for part, fn in (("singles", singles), ("greedy", greedy), ("concentration", concentration))}


ORACLE_BLOCKS = {key: value for name in ("gemma3-mean", "gemma3-mean-q", "smollm2-mean")
                 for key, value in _blocks(name).items()}
ORACLE_BLOCKS["oracle:gemma3-sufficiency:kept"] = ("oracle/gemma3-sufficiency.json", partial(kept, name="gemma3-sufficiency"))
"""Block name -> (the oracle file it reads, what writes it)."""
