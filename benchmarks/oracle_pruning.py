"""How much the oracle search's pruning can miss, measured where the answer is known: the
organism's exhaustive search (every set of 1-3 of its 16 heads, `locos_bench/data/organism/
ground_truth.json`) against the greedy search `evaluation.oracle_search` runs on real weights,
replayed on the same table for each `prune`.

    python benchmarks/oracle_pruning.py

For each question kind, mode (necessity: gold log-prob drop; sufficiency: gold log-prob kept)
and k = 2, 3: the greedy set's effect over the exhaustive best's (1.000: it found a best set),
and whether the pruned greedy found the same set as the unpruned one. No model runs: every
set's effect is the exhaustive search's record.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from locos_bench.names import set_name  # noqa: E402

PRUNES = (2, 4, 8, None)


def greedy(value: dict[str, float], heads: list[tuple[int, int]], k_max: int, prune: int | None) -> list[str]:
    """The greedy path the search grows (`oracle_search.grow`), on recorded effects."""
    ranked = sorted(heads, key=lambda h: (-value[set_name([h])], h))
    path = [(ranked[0],)]
    while len(path) < k_max:
        current = path[-1]
        pool = [h for h in ranked if h not in current][:prune]
        candidates = [tuple(sorted((*current, h))) for h in pool]
        path.append(max(candidates, key=lambda c: value[set_name(c)]))
    return [set_name(s) for s in path]


def main() -> int:
    data = json.loads((ROOT / "locos_bench" / "data" / "organism" / "ground_truth.json").read_text())
    rows = [("kind", "mode", "k", *[f"prune {p or 'all'}" for p in PRUNES], "same set as unpruned")]
    worst = {p: 1.0 for p in PRUNES}
    for task, result in data["tasks"].items():
        base = result["unablated"][1]
        for mode in ("necessity", "sufficiency"):
            sets = result[mode]["sets"]
            value = {name: (base - e[1] if mode == "necessity" else e[1]) for name, e in sets.items()}
            heads = sorted({tuple(int(x) for x in n.removeprefix("L").split("H")) for n in sets if "+" not in n})
            paths = {p: greedy(value, heads, 3, p) for p in PRUNES}
            for k in (2, 3):
                best = max(v for n, v in value.items() if n.count("+") == k - 1)
                floor = min(v for n, v in value.items() if n.count("+") == k - 1)
                shares = {p: (value[paths[p][k - 1]] - floor) / (best - floor) if best > floor else 1.0 for p in PRUNES}
                for p in PRUNES:
                    worst[p] = min(worst[p], shares[p])
                same = ", ".join(str(p) for p in PRUNES[:-1] if paths[p][k - 1] == paths[None][k - 1]) or "none"
                rows.append((task, mode, str(k), *[f"{shares[p]:.3f}" for p in PRUNES], same))
    print("Greedy set's effect as a share of the way from the worst to the best set of k (exhaustive):\n")
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    print("\nworst share: " + ", ".join(f"prune {p or 'all'} {worst[p]:.3f}" for p in PRUNES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
