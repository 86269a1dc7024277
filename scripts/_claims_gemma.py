"""The claims of the two Gemma 3 270M results pages, each written from its run's records
(`scripts/results_claims.py`)."""

from __future__ import annotations

from locos_bench.report.statistics.results import GOLD
from scripts._claims import (
    WORDS,
    PageError,
    Runs,
    above,
    bullet,
    detectors,
    estimate,
    grouped,
    head,
    interval,
    listed,
    relation_word,
    retrieval,
    separable_clause,
    signed,
    span,
    task,
    unseparated,
    verdict,
)

DEFAULT, EARLIER = "gemma3-default-seed0", "gemma3-sufficiency-steering"
"""The default run, and the c1dd9a9 default run at n = 8 the sufficiency run extends."""
SEPARABILITY = "[Separability](../methodology.md#separability-verdicts-and-rank-sets)"


def _first_on_both(run) -> tuple[tuple[int, int], list[str]]:
    """The head most detectors rank first on every retrieval task, and those detectors."""
    tasks = retrieval(run)
    firsts = {d: {t.detectors[d].ranks[0].head for t in tasks if t.detectors[d].ranks}
              for d in tasks[0].detectors if d != "random"}
    on_both = {d: next(iter(h)) for d, h in firsts.items()
               if len(h) == 1 and all(t.detectors[d].ranks for t in tasks)}
    best = max(set(on_both.values()), key=lambda h: sum(v == h for v in on_both.values()))
    return best, sorted(d for d, h in on_both.items() if h == best)


def one_head(get: Runs) -> str:
    run = get(DEFAULT)
    best, seven = _first_on_both(run)
    alone, nxt = {}, {}
    for t in retrieval(run):
        drops = [(x.drops[GOLD].value, d, x.head) for d, r in t.detectors.items() for x in r.ranks]
        alone[t.section] = max(v for v, _, h in drops if h == best)
        nxt[t.section] = max((v, d, h) for v, d, h in drops if h != best)
        if nxt[t.section][0] >= alone[t.section]:
            raise PageError(f"{t.section}: another head costs more alone than {head(best)}")
    kv, niah = (t.section for t in retrieval(run))
    kmax = max(run.budgets)
    top = max(r.curves[GOLD].drops[kmax].value for r in task(run, kv).detectors.values() if r.ok)
    if alone[kv] <= top / 2:
        raise PageError(f"'most': {head(best)} alone {alone[kv]:.2f}, the best top {kmax} {top:.2f}")

    def who(item) -> str:
        _, d, h = item
        return f"a random draw's {head(h)}" if d == "random" else f"`{d}`'s {head(h)}"

    tk, tn = task(run, kv), task(run, niah)
    locos_kv, locos_niah = tk.detectors["locos"].ranks, tn.detectors["locos"].ranks
    if locos_kv[0].head != best or locos_niah[1].head != best:
        raise PageError("`locos` no longer ranks the head first on kv-retrieval and second on niah-literal")
    first = locos_niah[0]
    k1 = min(run.budgets)
    h = tn.headline
    kept = tn.detectors["locos"].curves[h].values[k1].value
    unablated = tn.baseline.curves[h].values[k1].value
    theirs = {f"{tn.detectors[d].curves[h].values[k1].value:.3f}" for d in seven}
    if kept < unablated or len(theirs) != 1:
        raise PageError("`locos`'s k = 1 on niah-literal no longer reads as written")
    k4 = sorted(run.budgets)[1]
    not_zero = sorted(d for t in retrieval(run) for d, r in t.detectors.items() if d != "random"
                      and any(r.curves[t.headline].values[k].value > 0 for k in run.budgets if k >= k4))
    return bullet(
        f"**One head carries most of the effect.** Ablated alone, {head(best)} costs {alone[kv]:.2f} nats of "
        f"gold log-prob on {kv} and {alone[niah]:.2f} on {niah} (per-rank tables); the next costliest head in "
        f"any detector's top 3 costs {nxt[kv][0]:.2f} ({kv}, {who(nxt[kv])}) and {nxt[niah][0]:.2f} ({niah}, "
        f"{who(nxt[niah])}). {WORDS[len(seven)].capitalize()} detectors rank it first on both retrieval tasks. "
        f"`locos` ranks it first on {kv} and second on {niah}, after {head(first.head)} "
        f"({first.drops[GOLD].value:.2f} nats alone), so at k = {k1} it leaves {niah} intact ({h} {kept:.3f}, "
        f"unablated {unablated:.3f}) where the {WORDS[len(seven)]} bring it to {theirs.pop()}; from k = {k4} on, "
        f"every detector but {listed(sorted(set(not_zero)))} reaches 0.000 on both tasks.")


def headline(get: Runs) -> str:
    run, earlier = get(DEFAULT), get(EARLIER)
    fam = "ablation:headline"
    locos = verdict(run, fam, "locos", "random")
    before = verdict(earlier, fam, "locos", "random")
    dets = detectors(run)
    more = above(run, fam, "random", 1)
    not_ = [d for d in unseparated(run, fam, "random")]
    below, over = above(run, fam, "locos", -1), above(run, fam, "locos", 1)
    mde = [v.mde for v in run.verdicts[fam].verdicts]
    mde8 = [v.mde for v in earlier.verdicts[fam].verdicts]
    n, n8 = retrieval(run)[0].n_eval, retrieval(earlier)[0].n_eval
    misses = "; ".join(f"`{d}` is not ({interval(verdict(run, fam, d, 'random'), sign=True)})" for d in not_)
    against = "; ".join(f"{listed(ds)} {'above' if sign > 0 else 'below'} it "
                        f"({', '.join(interval(verdict(run, fam, d, 'locos'), sign=True) for d in ds)})"
                        for ds, sign in ((over, 1), (below, -1)) if ds)
    return bullet(
        f"**On the headline, `locos` is {relation_word(locos)} random heads** ({interval(locos, sign=True)}, "
        f"p {'< 0.001' if locos.p < 0.001 else f'{locos.p:.3f}'}; simultaneous over the run's "
        f"{run.verdicts[fam].size} pre-specified comparisons, {SEPARABILITY}); at n = {n8} it was "
        f"{relation_word(before)} them "
        f"({interval(before, sign=True)}). Of the {WORDS[len(dets)]} detectors, {WORDS[len(more)]} are separable "
        f"above random heads{'; ' + misses if misses else ''}. Against `locos`: "
        f"{against + '; the others are not separable from it' if against else 'nothing is separable from it'}. "
        f"Differences detectable at 80 % power are {span(mde)} at n = {n} ({span(mde8)} at n = {n8}).")


def gold(get: Runs) -> str:
    run, earlier = get(DEFAULT), get(EARLIER)
    fam = "ablation:gold_logprob"
    dets = detectors(run)
    if above(run, fam, "random", 1) != dets:
        raise PageError("not every detector is separable above random on the gold log-prob")
    up, down, same = above(run, fam, "locos", 1), above(run, fam, "locos", -1), unseparated(run, fam, "locos")
    up8 = above(earlier, fam, "locos", 1)
    late = [d for d in up if d not in up8]
    then = "; ".join(f"`{d}` sat at p {verdict(earlier, fam, d, 'locos').p:.3f}" for d in late)
    ups = listed((f"`{d}` ({interval(verdict(run, fam, d, 'locos'), sign=True)})" for d in up), code=False)
    ranks = run.ranks["gold_logprob"].ranks

    def rank(d: str) -> str:
        lo, hi = ranks[d]
        return f"{lo}" if lo == hi else f"{lo}-{hi}"

    top = sorted(d for d in ranks if ranks[d][0] == 1)
    return bullet(
        f"**On the gold log-prob drop-area (nats)** every detector is separable above random (`locos` "
        f"{interval(verdict(run, fam, 'locos', 'random'), sign=True)}). Against `locos`, {ups} "
        f"{'are' if len(up) > 1 else 'is'} separable above it (at n = {retrieval(earlier)[0].n_eval} only "
        f"{listed(up8)} {'were' if len(up8) > 1 else 'was'}{', and ' + then if then else ''}), {listed(down)} below "
        f"it, and {listed(same)} are not separable from it. Rank sets: {listed(top)} {rank(top[0])}, `locos` "
        f"{rank('locos')}, random {rank('random')}.")


def bottom_k(get: Runs) -> str:
    run = get(DEFAULT)
    kv = retrieval(run)[0]
    bottom = next(b for b in run.bottom_k if b.task == kv.name)
    row, metric = bottom.rows["locos"], bottom.headline
    zero = [k for k in run.budgets if all(row.curves[metric].values[j].value == 0 for j in run.budgets if j >= k)]
    if not zero:
        raise PageError("locos's bottom k no longer collapse kv-retrieval")
    ks = [k for k in run.budgets if k >= zero[0]]
    before = [k for k in run.budgets if 1 < k < zero[0]]
    values = [row.curves[metric].values[k].value for k in ks]
    rand = [kv.detectors["random"].curves[metric].values[k].value for k in ks]
    if min(rand) <= max(values):
        raise PageError("locos's bottom k no longer collapse kv-retrieval below random heads")
    unablated = kv.baseline.curves[metric].values[ks[0]].value
    earlier = (f"; its bottom {' and '.join(map(str, before))} leave it at "
               f"{', '.join(f'{row.curves[metric].values[k].value:.3f}' for k in before)} (unablated {unablated:.3f})"
               if before else "")
    head_, gold_ = (verdict(run, f"bottom-k:{f}", "locos (bottom-k)", "random") for f in ("headline", "gold_logprob"))
    tops = [verdict(run, f"bottom-k:{f}", "locos", "locos (bottom-k)") for f in ("headline", "gold_logprob")]
    top = ("separable on both figures" if all(v.separable for v in tops) else
           "; ".join(f"top-k − bottom-k {relation_word(v)} 0 on the {f}" for v, f in zip(tops, ("headline", "gold"))))
    return bullet(
        f"**Bottom-k** ([definition](../methodology.md#bottom-k-control)): `locos`'s last k heads are not a null "
        f"set. Its bottom {ks[0]} on {kv.section} collapse the task ({metric} {values[0]:.3f} at k = {ks[0]} and "
        f"{' and '.join(f'{k}' for k in ks[1:])}), more than random heads ({', '.join(f'{v:.3f}' for v in rand)})"
        f"{earlier}. "
        f"Over both tasks, bottom-k − random is {'separable' if head_.separable else 'not separable'} on the headline "
        f"({interval(head_, sign=True)}) {'and' if head_.separable == gold_.separable else 'but'} "
        f"{'is' if gold_.separable else 'is not'} on the gold log-prob ({interval(gold_, sign=True)} nats, "
        f"p {gold_.p:.3f}); top-k − bottom-k is {top}. The authors' score is signed, so the bottom of its ranking "
        f"holds heads that matter with the opposite sign, not heads that do not matter.")


def stability(get: Runs) -> str:
    run = get(DEFAULT)
    kv = retrieval(run)[0]
    st = {d: r.stability for d, r in kv.detectors.items() if r.stability is not None}
    kmax, kmid = max(run.budgets), sorted(run.budgets)[1]
    drawn = kv.sizes["calibration"]
    gated = sorted(d for d in ("locos", "dla") if st[d].n_calib < drawn)
    ns = sorted({st[d].n_calib for d in gated})
    others = sorted({s.n_calib for d, s in st.items() if d not in gated and d != "echo"})
    if len(ns) != 1 or others != [drawn]:
        raise PageError(f"calibration examples scored: {ns} for {gated}, {others} for the others")
    return bullet(
        f"**Selection stability** (B = {st['locos'].n_resamples:,} resamples of the calibration examples each "
        f"detector scored: {ns[0]} of the {drawn} for {listed(gated)}, which score only the examples that pass "
        f"their correctness gate, all {drawn} for the others but `echo`, which reads no task): on "
        f"{kv.section} `locos` keeps its top {kmax} (Jaccard {st['locos'].jaccard[kmax]:.3f}; "
        f"{st['locos'].jaccard[kmid]:.3f} at k = {kmid}), `attention-knockout` "
        f"{st['attention-knockout'].jaccard[kmax]:.3f}, `dla` {st['dla'].jaccard[kmax]:.3f}.")


def field(get: Runs) -> str:
    run = get(DEFAULT)
    tasks = retrieval(run)
    same = all(t.detectors["headkv"].heads.get(k) == t.detectors["attention"].heads.get(k)
               for t in tasks for k in run.budgets)
    fam = "ablation:headline"
    tie = interval(verdict(run, fam, "headkv", "random")) == interval(verdict(run, fam, "attention", "random"))
    if not tie:
        raise PageError("`headkv` no longer ties with `attention` on the headline")
    picks = "picks `attention`'s heads" if same else "picks mostly `attention`'s heads"
    dla_first = [t.detectors["dla"].ranks[0] for t in tasks]
    echo = [[head(x.head) for x in t.detectors["echo"].ranks[:2]] for t in tasks]
    if echo[0] != echo[1]:
        raise PageError("`echo` ranks different heads first on the two tasks")
    return bullet(
        f"**The field's detectors on Gemma 3 270M.** `headkv` {picks} and ties with it on the headline "
        f"({interval(verdict(run, fam, 'headkv', 'random'), sign=True)} above random heads, as `attention`). "
        f"`dla` ranks {head(dla_first[0].head)} ({tasks[0].section}) and {head(dla_first[1].head)} "
        f"({tasks[1].section}) first, heads that cost at most {max(x.drops[GOLD].value for x in dla_first):.2f} "
        f"nats alone. `echo`, which never reads a task, ranks {echo[0][0]} and {echo[0][1]} first and second on "
        f"both.")


def specificity(get: Runs) -> str:
    run = get(DEFAULT)
    k = max(run.budgets)
    spec = {r.detector: r.figures for r in run.summary}
    shown = ["locos", "path-patching", "dla", "random"]
    quoted = ", ".join(f"{'random' if d == 'random' else f'`{d}`'} {estimate(spec[d]['gold_logprob']['specificity'])}"
                       for d in shown)
    full = sorted(d for d, f in spec.items() if d != "random"
                  and f"{f['headline']['retrieval_relative'].value:.3f}" == "1.000"
                  and f"{f['headline']['control_relative'].value:.3f}" == "1.000")
    rest = sorted(set(spec) - set(full) - {"random"})
    zero = [d for d, f in spec.items() if d != "random" and f"{abs(f['headline']['specificity'].value):.3f}" == "0.000"]
    return bullet(
        f"**Specificity at k = {k}** ([definition](../methodology.md#controls-and-specificity)), primary in gold "
        f"log-prob nats: {quoted}. Relative, it saturates on both sides: at k = {k} every detector's heads but "
        f"{listed(rest, chr(39) + 's')} remove all of both retrieval tasks and all of arithmetic's correct answers "
        f"(relative drops 1.000), so relative specificity is 0.000 for {WORDS[len(zero)]} detectors.")


def control(get: Runs) -> str:
    run = get(DEFAULT)
    k = max(run.budgets)
    controls = [t for t in run.tasks if t.kind == "control"]
    metric = controls[0].headline
    unablated = {f"{t.baseline.curves[metric].values[k].value:.3f}" for t in controls}
    after = [f"{t.detectors['random'].curves[metric].values[k].value:.3f}" for t in controls]
    rel = next(r for r in run.summary if r.detector == "random").figures["headline"]["control_relative"]
    if len(unablated) != 1:
        raise PageError("the control tasks' unablated figures differ")
    verb = "does not survive" if rel.low > 0.1 else "survives"
    return bullet(
        f"**The arithmetic control {verb} random heads.** With each retrieval task's random heads at k = {k}, "
        f"{metric} falls from {unablated.pop()} to {' and '.join(after)} (random's relative control drop "
        f"{estimate(rel)}, against a goal of 0.1). The next section says why no control tried does.")


# -- the sufficiency and steering run ------------------------------------------------------------------

def sufficiency_budgets(get: Runs) -> str:
    run = get(EARLIER)
    kv, niah = run.sufficiency[0], run.sufficiency[1]
    k1, k4 = sorted(run.budgets)[:2]
    floor_k1 = {t.task: {f"{r.kept[k1].value:.3f}" for r in t.rows.values()} for t in run.sufficiency}
    floors = {t.task: f"{t.floor.value:.3f}" for t in run.sufficiency}
    if any(v != {floors[t]} for t, v in floor_k1.items()):
        raise PageError("at k = 1 some detector does not lose what the floor loses")
    at4 = {d: 0.0 - r.kept[k4].value for d, r in kv.rows.items()}
    groups = grouped(at4, reverse=False)
    parts = []
    for i, (v, ds) in enumerate(groups):
        names = listed(ds).replace("`random`", "random heads")
        what = "nothing (0.000)" if v == "0.000" else v
        parts.append(f"{'and ' if i == len(groups) - 1 else ''}{names} {'lose' if i == 0 else ''} {what}".replace("  ", " "))
    if groups[-1][0] != floors[kv.task].lstrip("-"):
        raise PageError("the worst top 4 on kv-retrieval is not the floor")
    niah4 = {d: r.kept[k4].value for d, r in niah.rows.items()}
    best_v, best = grouped(niah4)[0]
    worst = [d for d in ("locos", "attention-knockout")]
    lose = {f"{-niah4[d]:.3f}" for d in worst}
    if len(lose) != 1:
        raise PageError("`locos` and knockout lose different amounts on niah-literal")
    return bullet(
        f"**Sufficiency, kept − unablated.** With every other head streaming, L11H2 alone does not suffice: at "
        f"k={k1} every detector loses what the floor loses ({kv.task} {estimate(kv.floor)} {kv.headline}, "
        f"{niah.task} {floors[niah.task]}). At k={k4} on {kv.task}, {', '.join(parts)} (the floor). On "
        f"{niah.task} the best top {k4} are {listed(best, chr(39) + 's')} ({best_v}); "
        f"{listed(worst, chr(39) + 's')} lose {lose.pop()} there.")


def sufficiency_mean(get: Runs) -> str:
    run = get(EARLIER)
    rows = {r.detector: r for r in run.sufficiency_summary}
    locos = rows["locos"]
    areas = {d: r.area.value for d, r in rows.items() if d != "locos"}
    here = f"`locos` {estimate(locos.area)} ({estimate(locos.gold_area)} nats)"
    parts, placed = [], False
    for v, ds in grouped(areas):
        if not placed and locos.area.value >= float(v):
            parts.append(here)
            placed = True
        parts.append(f"{listed(ds).replace('`random`', 'random')} {v}")
    text = ", ".join(parts if placed else [*parts, here])
    head_ = run.verdicts["sufficiency:headline"]
    fam = "sufficiency:gold_logprob"
    dets = detectors(run)
    more = above(run, fam, "random", 1)
    but = sorted(set(dets) - set(more))
    less = above(run, fam, "locos", -1)
    if above(run, fam, "locos", 1):
        raise PageError("a detector keeps separably more than `locos`")
    n = retrieval(run)[0].n_eval
    return bullet(
        f"**Mean over both tasks** (area of kept − unablated): {text}. Simultaneously over the run's "
        f"{head_.size} comparisons, on the headline at n = {n} "
        f"{separable_clause(run, 'sufficiency:headline', 'keep')}; on the gold log-prob, every "
        f"detector but {listed(but)} keeps separably more than random heads (`locos` "
        f"{interval(verdict(run, fam, 'locos', 'random'), sign=True)} nats), and {listed(less)} keep separably "
        f"less than `locos`; the others are not separable from it.")


def kv_kept(get: Runs) -> str:
    run = get(EARLIER)
    k = max(run.budgets)
    kept = [r.kv_kept for r in run.sufficiency_summary if r.kv_kept is not None]
    floors = [t.floor_kv for t in run.sufficiency]
    return bullet(
        f"**KV kept.** Gemma 3 270M has one KV head per layer, so a full query head keeps its whole layer: {k} "
        f"full heads keep {span(kept)} of the cache on these ~330-token prompts (each detector's mean over the two "
        f"tasks; the floor {span(floors, 3)}), not {k}/72. On such short prompts the sliding layers' 512-token "
        f"window saves nothing; the savings grow with length. The streaming path's own time and memory are on "
        f"the [Performance](../performance.md#streaming-heads) page.")


def steering(get: Runs) -> str:
    run = get(EARLIER)
    rows = {r.detector: r for r in run.steering_summary if r.chosen}
    alphas = {r.alpha for r in rows.values()}
    gains = {d: r.retrieval_gain.value for d, r in rows.items() if d != "random"}
    costs = [r.control_cost.value for d, r in rows.items() if d != "random"]
    lo, hi = min(gains, key=gains.get), max(gains, key=gains.get)
    fam = "steering:gold_logprob"
    more = above(run, fam, "random", 1)
    less = above(run, fam, "locos", -1)
    if "locos" not in more or above(run, fam, "locos", 1) or above(run, fam, "random", -1):
        raise PageError("the steering gold verdicts say more than the bullet")
    return bullet(
        f"**Amplification helped nowhere clearly.** Every detector chose alpha {alphas.pop():g} on its calibration "
        f"examples (the only one offered). Retrieval gains in contains range from {signed(gains[lo], 3)} "
        f"(`{lo}`) to {signed(gains[hi], 3)} (`{hi}`), `locos` {estimate(rows['locos'].retrieval_gain)}; control "
        f"costs on arithmetic {min(costs):.2f} to {max(costs):.2f}, random heads "
        f"{estimate(rows['random'].control_cost)}. On the headline, "
        f"{separable_clause(run, 'steering:headline', 'gain')}. On the gold log-prob, "
        f"{', '.join(f'`{d}`' for d in more if d != 'locos')} and `locos` "
        f"({interval(verdict(run, fam, 'locos', 'random'), sign=True)} nats) gain separably "
        f"more than random heads, and {listed(less)} separably less than `locos`.")


def _oracle_table(run, task_name: str, figure: str = "gold"):
    found = [o for o in run.oracle_shares if o.task == task_name and o.figure == figure and o.mode == "necessity"]
    if len(found) != 1:
        raise PageError(f"{run.name}: no oracle section for {task_name} ({figure})")
    return found[0]


def oracle(get: Runs) -> str:
    run = get(DEFAULT)
    if not run.oracle_shares:
        raise PageError(f"{run.name} has no oracle section")
    tasks = [t.name for t in retrieval(run)]
    tables = {t: _oracle_table(run, t) for t in tasks}
    grid = tables[tasks[0]].grid
    ks = [k for k in tables[tasks[0]].budgets if k not in grid]  # the run's budgets: the area's
    k2 = sorted(ks)[1]

    def area(t: str, d: str) -> str:
        return estimate(next(r for r in tables[t].rows if r.detector == d).area)

    def best(t: str) -> list[str]:
        rows = [r for r in tables[t].rows if r.area is not None]
        top = max(r.area.value for r in rows)
        return [r.detector for r in rows if r.area.value == top]

    leaders = {t: best(t) for t in tasks}
    if len({tuple(v) for v in leaders.values()}) == 1:
        lead = (f"{listed(leaders[tasks[0]])} on both tasks ("
                + ", ".join(f"{t} {area(t, leaders[t][0])}" for t in tasks) + ")")
    else:
        lead = "; ".join(f"{listed(leaders[t])} on {t} ({area(t, leaders[t][0])})" for t in tasks)
    per_task = (f"{lead}; `locos` reaches {' and '.join(area(t, 'locos') for t in tasks)}, random heads "
                f"{' and '.join(area(t, 'random') for t in tasks)}")
    over = sorted({r.detector for t in tasks for r in tables[t].rows
                   if r.share.get(k2) is not None and r.share[k2].low > 1})
    drops = ", ".join(f"{t} {estimate(tables[t].oracle[k2], 2)}" for t in tasks)

    def agreement(t: str, d: str) -> str:
        r = next(r for r in tables[t].rows if r.detector == d)
        return f"Spearman {estimate(r.spearman, 2)}, AUROC {estimate(r.auroc, 2)}"

    if any(next(r for r in tables[t].rows if r.detector == "locos").spearman.high >= 0.3 for t in tasks):
        raise PageError("`locos`'s scores no longer agree little with the scan (Spearman up to 0.3)")
    auroc_best = {t: max((r for r in tables[t].rows if r.auroc is not None), key=lambda r: r.auroc.value)
                  for t in tasks}
    sides = []
    for t in tasks:
        for k in sorted({v.k for v in tables[t].verdicts if v.k > 1}):
            up = sorted(v.a for v in tables[t].verdicts if v.separable and v.k == k and v.b == "locos")
            down = sorted(v.b for v in tables[t].verdicts if v.separable and v.k == k and v.a == "locos")
            if up or down:
                sides.append(f"{t} at k = {k}, above it {listed(up) if up else 'none'}, below it "
                             f"{listed(down) if down else 'none'}")
    pairs = "; ".join(sides)
    closest = ""
    if grid:
        def leaders_at(t: str, k: int) -> str:
            rows = [r for r in tables[t].rows if r.share.get(k) is not None]
            top = max(r.share[k].value for r in rows)
            tied = sorted(r.detector for r in rows if r.share[k].value == top)  # the same heads tie exactly
            return f"{k}: {listed(tied)} {estimate(next(r for r in rows if r.detector == tied[0]).share[k], 2)}"

        every = sorted(tables[tasks[0]].budgets)
        closest = (f" At every k from {every[0]} to {every[-1]} (k = {', '.join(map(str, grid))} from the run's grid "
                   "units, gold log-prob only), the largest point estimate of the share (a description, not a "
                   "verdict: the pairs below are) is "
                   + "; ".join(f"{t}, k = " + ", ".join(leaders_at(t, k) for k in every) for t in tasks) + ".")
    return bullet(
        f"**Against the oracle** (`locos_bench/data/oracle/gemma3-mean.json`: the cross-fitted greedy search of the "
        f"heads whose mean ablation costs most gold log-prob, [Ground truth on real weights]"
        f"(../methodology.md#ground-truth-on-real-weights)), the area share of its drop over k = "
        f"{', '.join(map(str, ks))} is largest for {per_task}. At k = {k2} the oracle's drop is {drops} nats, and "
        f"{listed(over)} take more than that (share interval above 1): greedy growth is a lower bound on the best "
        f"pair. `locos`'s scores agree little with the single-head scan ({'; '.join(f'{t}: ' + agreement(t, 'locos') for t in tasks)}); "
        f"the best AUROC for the 8 strongest single heads is {'; '.join(f'{t}: `{r.detector}` {estimate(r.auroc, 2)}' for t, r in auroc_best.items())}."
        + closest + " "
        + (f"Separable from `locos` on the share past k = 1 (one max-T family per task and figure): {pairs}."
           if pairs else
           "Past k = 1 no pair with `locos` is separable on the share.")
        + " Whether `locos` finds the heads that *suffice* is read on [gemma3 sufficiency](gemma3-sufficiency.md), "
          "against the sufficiency oracle.")


GEMMA_BLOCKS = {
    "default:oracle": (DEFAULT, oracle),
    "default:one-head": (DEFAULT, one_head),
    "default:headline": (DEFAULT, headline),
    "default:gold": (DEFAULT, gold),
    "default:bottom-k": (DEFAULT, bottom_k),
    "default:stability": (DEFAULT, stability),
    "default:field": (DEFAULT, field),
    "default:specificity": (DEFAULT, specificity),
    "default:control": (DEFAULT, control),
    "sufficiency:budgets": (EARLIER, sufficiency_budgets),
    "sufficiency:mean": (EARLIER, sufficiency_mean),
    "sufficiency:kv-kept": (EARLIER, kv_kept),
    "sufficiency:steering": (EARLIER, steering),
}
