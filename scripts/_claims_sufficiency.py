"""The claims of `docs/results/gemma3-sufficiency.md`: the default run extended by `--sufficiency`,
read against gemma3's shipped sufficiency oracle (#48). Each function writes one block from the
run's records, as `scripts/results_claims.py` describes."""

from __future__ import annotations

from scripts._claims import PageError, Runs, bullet, estimate, listed, retrieval

SUFFICIENCY = "gemma3-sufficiency"
"""The default run (`gemma3-default-seed0`'s records) extended by `--sufficiency`."""


def _tables(run, figure: str) -> dict[str, object]:
    """Per retrieval task, the run's sufficiency table against the oracle on `figure`."""
    out = {}
    for t in retrieval(run):
        found = [o for o in run.oracle_shares if o.task == t.name and o.figure == figure and o.mode == "sufficiency"]
        if len(found) != 1:
            raise PageError(f"{run.name}: no sufficiency oracle section for {t.name} ({figure})")
        out[t.name] = found[0]
    return out


def _row(table, detector: str):
    return next(r for r in table.rows if r.detector == detector)


def kept(get: Runs) -> str:
    """Who keeps most of what the oracle's kept set keeps, and where `locos` stands."""
    run = get(SUFFICIENCY)
    tables = _tables(run, "gold")
    first = next(iter(tables.values()))
    ks = first.budgets
    per_task = []
    for name, table in tables.items():
        rows = [r for r in table.rows if r.area is not None]
        top = max(r.area.value for r in rows)
        leaders = [r.detector for r in rows if r.area.value == top]
        oracle = ", ".join(f"k={k} {estimate(table.oracle[k], 2)}" for k in ks)
        per_task.append(
            f"on {name} the oracle's kept set holds {oracle} nats above the floor; the largest area share is "
            f"{listed(leaders)}'s, {estimate(_row(table, leaders[0]).area)}, `locos`'s "
            f"{estimate(_row(table, 'locos').area)}, random heads' {estimate(_row(table, 'random').area)}")
    sides = []
    for name, table in tables.items():
        for k in sorted({v.k for v in table.verdicts}):
            up = sorted(v.a for v in table.verdicts if v.separable and v.k == k and v.b == "locos")
            down = sorted(v.b for v in table.verdicts if v.separable and v.k == k and v.a == "locos")
            if up or down:
                sides.append(f"{name} at k = {k}, above it {listed(up) if up else 'none'}, below it "
                             f"{listed(down) if down else 'none'}")
    over = {name: sorted(r.detector for r in table.rows if r.share.get(k) is not None and r.share[k].low > 1)
            for name, table in tables.items() for k in [sorted(ks)[1]]}
    beaten = "; ".join(f"{listed(d)} on {name}" for name, d in over.items() if d)
    lower = (f" Greedy growth is a lower bound: at k = {sorted(ks)[1]} the top pairs of {beaten} keep more than "
             "the oracle's pair (share interval above 1)." if beaten else "")
    return bullet(
        "**Against the sufficiency oracle** (`locos_bench/data/oracle/gemma3-sufficiency.json`: the "
        "cross-fitted greedy search of the heads that, kept alone at full attention with every other head "
        "streaming, keep the most gold log-prob), over k = " + ", ".join(map(str, ks)) + ": "
        + "; ".join(per_task) + ". "
        + (f"Separable from `locos` on the kept share (one max-T family per task): {'; '.join(sides)}."
           if sides else "No detector's kept share is separable from `locos`'s at any budget up to 4.")
        + lower)


SUFFICIENCY_BLOCKS = {
    "gemma3-sufficiency:kept": (SUFFICIENCY, kept),
}
