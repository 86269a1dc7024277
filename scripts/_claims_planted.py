"""The claims of the planted and organism results pages, each written from its run's records
(`scripts/results_claims.py`)."""

from __future__ import annotations

from fractions import Fraction
from functools import partial

import numpy as np

from scripts._claims import (
    WORDS,
    PageError,
    Runs,
    above,
    bullet,
    estimate,
    interval,
    listed,
    oracle_shares,
    relation,
    span,
    unseparated,
    verdict,
)

PLANTED, NONLITERAL = "planted-reference", "planted-nonliteral-reference"
PLANTED_SUFF, NONLITERAL_SUFF = "planted-sufficiency-steering", "planted-nonliteral-sufficiency-steering"
ORGANISM = "organism-reference"
LABELS = {"retrieval-head": "`retrieval-head` (copy-paste score)"}


def _first(truth) -> set[str]:
    """The roles holding the detector's rank-1 head."""
    return {role for role, ranks in truth.ranks.items() if ranks and min(ranks.values()) == 1}


def _zero_scores(res) -> bool:
    return res.scores is not None and not np.any(np.asarray(res.scores))


ORDINALS = {1: "first", 2: "second", 3: "third"}


def _why(task, d: str) -> str:
    """What ranks first or breaks the tie, read from the detector's ranks of the planted roles."""
    res = task.detectors[d]
    t = res.truth
    if _zero_scores(res):
        return "every head scores 0"
    tied = {role for role, heads in t.ties.items() if any(lo == 1 for lo, _ in heads.values())}
    if tied == {"retrieval", "read_only_decoy"}:
        return "both retrieval heads tie the read-only decoy"
    if t.precision_at_n == 1.0:
        parametric = int(min(t.ranks["parametric_decoy"].values()))
        if parametric in ORDINALS:
            locos = max(task.detectors["locos"].truth.ranks["parametric_decoy"].values())
            where = "last" if locos == np.asarray(res.scores).size else f"at {locos:g}"
            return f"the parametric decoy ranks {ORDINALS[parametric]}, where `locos` ranks it {where}"
        return "both retrieval heads on top"
    first = _first(t)
    if first == {"read_only_decoy"}:
        return "the read-only decoy ranks first"
    if first == {"previous_token"}:
        return "the upstream previous-token head ranks first"
    return ""


def truth_table(get: Runs, name: str) -> str:
    """The ground-truth table: detectors with the same precision@2 and reading in one row."""
    run = get(name)
    task = run.tasks[0]
    order = [r.detector for r in run.summary]
    rows: dict[tuple[float, str], list[str]] = {}
    for d in order:
        t = task.detectors[d].truth
        rows.setdefault((round(t.precision_at_n, 3), _why(task, d)), []).append(d)
    n = task.detectors["locos"].truth.n
    lines = [f"| detector | precision@{n} | AUROC | what ranks first or breaks the tie |", "|---|---|---|---|"]
    for (precision, why), ds in sorted(rows.items(), key=lambda kv: (-kv[0][0], order.index(kv[1][0]))):
        aurocs = [f"{task.detectors[d].truth.auroc:.3f}" for d in ds]
        auroc = aurocs[0] if len(set(aurocs)) == 1 else ", ".join(aurocs)
        names = ", ".join(LABELS.get(d, f"`{d}`") for d in ds)
        lines.append(f"| {names} | {precision:.3f} | {auroc} | {why} |".replace(" |  |", " | |"))
    return "\n".join(lines)


def bottom_k(get: Runs, name: str, coda: str) -> str:
    run = get(name)
    bottom = run.bottom_k[0]
    row = bottom.rows["locos"]
    values = {f"{row.curves[bottom.headline].values[k].value:.3f}" for k in run.budgets}
    baseline = {f"{run.tasks[0].baseline.curves[bottom.headline].values[k].value:.3f}" for k in run.budgets}
    if values != baseline:
        raise PageError(f"{name}: `locos`'s bottom k no longer leave the task intact")
    words = []
    for fig in ("headline", "gold_logprob"):
        top = verdict(run, f"bottom-k:{fig}", "locos", "locos (bottom-k)")
        rand = verdict(run, f"bottom-k:{fig}", "locos (bottom-k)", "random")
        words.append((top, rand))
    (top, rand), (gtop, grand) = words
    same = top.separable == gtop.separable and rand.separable == grand.separable
    return bullet(
        f"**Bottom-k** ([definition](../methodology.md#bottom-k-control)): `locos`'s bottom "
        f"{' and '.join(str(k) for k in run.budgets)} leave the task intact ({bottom.headline.replace('_', ' ')} "
        f"{values.pop()} at {'both budgets' if len(run.budgets) == 2 else 'every budget'}); on the headline, "
        f"top-k − bottom-k is {interval(top, sign=True)}, {'separable' if top.separable else 'not separable'}, and "
        f"bottom-k − random {interval(rand, sign=True)}, {relation(rand, 'random heads')}"
        f"{' (the gold log-prob says the same)' if same else ''}. {coda}")


def ties(get: Runs, name: str, why: str) -> str:
    run = get(name)
    t = run.tasks[0].detectors["retrieval-head"].truth
    share = Fraction(t.precision_at_n).limit_denominator(12)
    return bullet(
        f"`retrieval-head`'s scores tie: {why}. A tie group across the cut-off counts by its expected share "
        f"({share.numerator}/{share.denominator} here, precision@{t.n} {t.precision_at_n:.3f}), and its ablated "
        f"heads follow the run's tie seed. The first publications broke ties by (layer, head), so the heads' "
        f"indices decided the figure they printed.")


def ablation(get: Runs) -> str:
    run = get(PLANTED)
    task = run.tasks[0]
    area = {d: task.detectors[d].curves[task.headline].drop_area for d in task.detectors}
    perfect = [d for d in task.detectors if task.detectors[d].truth.precision_at_n == 1.0]
    same = sorted(d for d in task.detectors if estimate(area[d]) == estimate(area["locos"]))
    if not set(perfect) <= set(same):
        raise PageError("the precise detectors no longer share one drop-area")
    extra = sorted(set(same) - set(perfect))
    readers = sorted(d for d in task.detectors if _first(task.detectors[d].truth) == {"read_only_decoy"})
    k1 = min(run.budgets)
    kept = {f"{task.detectors[d].curves[task.headline].values[k1].value:.3f}" for d in readers}
    read_area = {estimate(area[d]) for d in readers}
    intact = sorted(d for d in task.detectors if d != "random"
                    and all(f"{task.detectors[d].curves[task.headline].values[k].value:.3f}" == "1.000"
                            for k in run.budgets))
    if len(kept) != 1 or len(read_area) != 1:
        raise PageError("the read-only-decoy readers differ")
    return bullet(
        f"Ablation cannot tell the precise detectors apart: the {WORDS[len(perfect)]} with precision@2 1.000, "
        f"{listed(extra)} all have retrieval drop-area {estimate(area['locos'])}. The {WORDS[len(readers)]} that "
        f"put the read-only decoy first lose nothing at k={k1} (exact match {kept.pop()}: one of the two redundant "
        f"retrieval heads is left, and it answers alone) and reach drop-area {read_area.pop()}; {listed(intact)} "
        f"lose nothing at either budget. The ground truth separates what ablation ties.")


def sufficiency(get: Runs, name: str, hides: str) -> str:
    run = get(name)
    t = run.sufficiency[0]
    k1 = min(run.budgets)
    task = run.tasks[0]
    first = {d: _first(task.detectors[d].truth) if task.detectors[d].truth else set() for d in t.rows}
    full = [d for d in t.rows if "retrieval" in first[d]]
    retained = {f"{t.rows[d].retained.value:.3f}" for d in full}
    if retained != {"1.000"}:
        raise PageError("a detector whose top 1 is a retrieval head loses something")
    floor = f"{t.floor.value:.3f}"
    other = sorted(d for d in t.rows if first[d] & {"read_only_decoy", "previous_token"})
    at_floor_k1 = {f"{t.rows[d].kept[k1].value:.3f}" for d in other}
    if at_floor_k1 != {floor}:
        raise PageError("the read-only readers no longer sit at the floor at k = 1")
    share = {f"{t.rows[d].retained.value:.3f}" for d in other}
    fam = "sufficiency:headline"
    vs = {interval(verdict(run, fam, d, "locos"), sign=True) for d in other}
    sep = {verdict(run, fam, d, "locos").separable for d in other}
    if len(share) != 1 or len(vs) != 1 or len(sep) != 1:
        raise PageError("the read-only readers differ")
    v = verdict(run, fam, other[0], "locos")
    stay = sorted(d for d in t.rows if d != "random"
                  and all(f"{e.value:.3f}" == floor for e in t.rows[d].kept.values()))
    leave = sorted(d for d in t.rows if d not in stay and d not in full and d not in other and d != "random")
    later = "; ".join(f"`{d}` leaves it only at k={min(k for k, e in t.rows[d].kept.items() if f'{e.value:.3f}' != floor)} "
                      f"(retained share {t.rows[d].retained.value:.3f})" for d in leave)
    return "\n".join([
        bullet(f"Every detector whose top 1 is a retrieval head retains everything from k={k1} (retained share "
               f"{retained.pop()})."),
        bullet(f"{listed(other)}, which rank the read-only decoy or the previous-token head first, retain only the "
               f"floor at k={k1} (retained share {share.pop()}, paired {vs.pop()} against `locos`, "
               f"{relation(v, '`locos`').replace('from `locos`', 'from it').replace('below `locos`', 'below it')})"
               f"{hides}."),
        bullet(f"{listed(stay)} {'stays' if len(stay) == 1 else 'stay'} at the floor at every k"
               f"{'; ' + later if later else ''}; the floor itself "
               f"retains {t.floor_retained.value:.3f}."),
    ])


def steering(get: Runs, name: str, coda: str) -> str:
    run = get(name)
    accuracy = {f"{t.unablated:.3f}" for t in run.steering}
    if len(accuracy) != 1:
        raise PageError("the steered tasks' unablated accuracies differ")
    return bullet(f"Steering has no room here{coda[0]}: accuracy is already {accuracy.pop()} on the task and its "
                  f"harder variant.{coda[1]}")


# -- the organism ----------------------------------------------------------------------------------------

def organism_shares(get: Runs) -> str:
    run = get(ORGANISM)
    k = max(run.budgets)
    kinds = {"organism-literal": "literal", "organism-nonliteral": "non-literal",
             "organism-nonliteral-answer": "non-literal answer"}
    cols = [(mode, t) for mode in ("necessity", "sufficiency") for t in run.oracle]
    order = [r.detector for r in run.oracle[0].rows]
    order = [d for d in ("locos", "locos-argmax", "dla", "attention", "retrieval-head", "qrhead", "headkv", "echo",
                         "attention-knockout", "activation-patching", "path-patching", "attribution-patching", "eap-ig")
             if d in order] + [d for d in order if d not in ("locos", "locos-argmax", "dla", "attention",
                                                               "retrieval-head", "qrhead", "headkv", "echo",
                                                               "attention-knockout", "activation-patching",
                                                               "path-patching", "attribution-patching", "eap-ig",
                                                               "random")] + ["random"]
    cells = {(d, i): next(r for r in t.rows if r.detector == d).share[mode][k] for d in order
             for i, (mode, t) in enumerate(cols)}
    best = {}
    for i in range(len(cols)):
        values = [f"{cells[d, i].value:.3f}" for d in order]
        top = max(values, key=float)
        best[i] = top if values.count(top) == 1 else None
    head = ["detector"] + [f"{'drop' if m == 'necessity' else 'kept'}, {kinds[t.task]}" for m, t in cols]
    draws = len(run.tasks[0].detectors["random"].draws)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for d in order:
        row = [f"`random` ({draws} draws)" if d == "random" else f"`{d}`"]
        for i in range(len(cols)):
            e = cells[d, i]
            text = estimate(e)
            if best[i] == f"{e.value:.3f}":
                text = text.replace(f"{e.value:.3f} ", f"**{e.value:.3f}** ", 1)
            row.append(text)
        lines.append("| " + " | ".join(row) + " |")
    intro = (f"Share of the oracle's effect at k = {k} (the detector's effect over the best set's, Fieller "
             f"{round(100 * run.level)}% intervals; the leaderboard has k = "
             f"{' and '.join(str(b) for b in run.budgets if b != k)} and the precisions):")
    return intro + "\n\n" + "\n".join(lines)


def organism_limits(get: Runs) -> str:
    run = get(ORGANISM)
    n = {t.n_examples for t in run.oracle}
    layers = len(run.tasks[0].detectors["locos"].scores)
    if len(n) != 1:
        raise PageError("the organism's kinds hold different numbers of examples")
    return bullet(
        f"**The limits.** {n.pop()} examples per kind; the best set is picked on the same examples (shares lean "
        f"low); a {layers}-layer model trained with head dropout, so redundancy is built in; one seed of training. "
        f"The organism answers `which city has NAME been to` perfectly, but its answer-writing heads are also the "
        f"heads that read the story: it does not reproduce the gap the paper claims between reading and writing "
        f"heads. A model where the two differ (as on `planted-nonliteral`, by hand) would be needed to show it on "
        f"trained weights.")


KINDS = {"organism-literal": "literal", "organism-nonliteral": "non-literal",
         "organism-nonliteral-answer": "non-literal answer"}


def _best(entry: dict) -> str:
    sets = entry["sets"]
    names = " or ".join(sets) if len(sets) <= 2 else f"{entry['n_sets']} sets"
    return f"{names} ({entry['value']:.3f})"


def _pair_drops() -> dict[str, dict[str, float]]:
    """Kind -> each pair of layer-0 heads -> its mean drop when mean-ablated (the ground truth's
    per-example outcomes)."""
    from locos_bench.models.organism import GROUND_TRUTH, ORGANISM_DIR
    from locos_bench.report.statistics.oracle import outcome_vector, read_ground_truth

    data = read_ground_truth(ORGANISM_DIR / GROUND_TRUTH, None)
    out = {}
    for kind, result in data["tasks"].items():
        base = outcome_vector(result["outcomes"]["unablated"])
        out[kind] = {name: float((base - outcome_vector(v)).mean()) for name, v in result["necessity"]["outcomes"].items()
                     if name.count("+") == 1 and all(h.startswith("L0") for h in name.split("+"))}
    return out


def organism_oracle(get: Runs) -> str:
    run = get(ORGANISM)
    ks = [k for k in run.budgets if k > 1]
    lines = [f"| kind | best necessity set (drop), k = {' / '.join(map(str, ks))} | best sufficiency set (kept above the "
             f"floor), k = {' / '.join(map(str, ks))} |", "|---|---|---|"]
    for t in run.oracle:
        lines.append(f"| {KINDS[t.task]} | {' / '.join(_best(t.best['necessity'][k]) for k in ks)} | "
                     f"{' / '.join(_best(t.best['sufficiency'][k]) for k in ks)} |")
    singles = [t.best["necessity"][1]["value"] for t in run.oracle]
    pairs = _pair_drops()
    best2 = {t.task: t.best["necessity"][2] for t in run.oracle}
    if any(b["n_sets"] != 1 or not b["sets"][0].startswith("L0") for b in best2.values()):
        raise PageError("a best necessity pair is tied or not of layer 0")
    names = [t.task for t in run.oracle if "answer" not in t.task]
    city = [t.task for t in run.oracle if "answer" in t.task]
    if len({best2[k]["sets"][0] for k in names}) != 1:
        raise PageError("the two name kinds' best pairs differ")
    others = [v for kind, drops in pairs.items() for name, v in drops.items() if name != best2[kind]["sets"][0]]
    triple = {t.best["necessity"][3]["sets"][0] for t in run.oracle if t.best["necessity"][3]["n_sets"] == 1}
    if len(triple) != 1 or any(t.best["necessity"][3]["n_sets"] != 1 for t in run.oracle):
        raise PageError("the best necessity triple differs between kinds")
    layer1 = all(all(h.startswith("L1") for h in t.best["sufficiency"][k]["sets"][0].split("+"))
                 for t in run.oracle if t.task in names for k in ks)
    city_heads = sorted({h for t in run.oracle if t.task in city  # the tied best pairs' heads
                         for s in t.best["sufficiency"][ks[0]]["sets"] for h in s.split("+")})
    if not layer1:
        raise PageError("the name kinds' best sufficiency sets are not all of layer 1")
    return "\n".join(lines) + "\n\n" + "\n".join([
        bullet(f"**Necessity** belongs to layer 0: no single head matters (best single drop "
               f"{', '.join(f'{v:.3f}' for v in singles[:-1])} and {singles[-1]:.3f}), but particular pairs of "
               f"layer-0 heads remove most of it ({best2[names[0]]['sets'][0]} for the name kinds, "
               f"{best2[city[0]]['sets'][0]} for the city; the other pairs {span(others)}), and {triple.pop()} "
               f"{span([t.best['necessity'][3]['value'] for t in run.oracle])} on every kind. They work before the "
               f"lookup (binding a character's name to the landmark three tokens later), redundantly."),
        bullet(f"**Sufficiency** belongs to the heads that read the needle from the question: layer 1 for the two "
               f"name-answering kinds, {listed(city_heads, code=False)} for the city answer."),
    ])


READERS = ["attention", "qrhead", "headkv"]


def organism_sufficiency(get: Runs) -> str:
    run = get(ORGANISM)
    k = max(run.budgets)
    kept = oracle_shares(run, "sufficiency", k)
    locos = kept["locos"]
    readers = [s for d in READERS for s in kept[d]]
    nonliteral = [i for i, t in enumerate(run.oracle) if "nonliteral" in t.task]
    also = sorted(d for d in kept if d not in READERS + ["locos", "random"]
                  and all(f"{kept[d][i]:.2f}" == f"{locos[i]:.2f}" for i in nonliteral))
    cells = {(r.detector, t.task): r.share["sufficiency"][k] for t in run.oracle for r in t.rows}
    named = [(d, t.task) for d in READERS for t in run.oracle] + [(d, run.oracle[i].task) for d in also
                                                                   for i in nonliteral]
    if not all(cells[d, kind].low <= cells["locos", kind].high and cells["locos", kind].low <= cells[d, kind].high
               for d, kind in named):
        raise PageError("an interval of the detectors named with `locos` no longer overlaps `locos`'s")
    answer = run.oracle[nonliteral[-1]]
    tops = {}
    for r in answer.rows:
        if r.detector != "random":
            tops.setdefault(tuple(sorted(r.top[:k])), []).append(r.detector)
    common, same = max(tops.items(), key=lambda kv: len(kv[1]))
    return bullet(
        f"**The heads that carry the lookup (sufficiency).** `locos` ranks them first on every kind: its top {k} "
        f"keep {', '.join(f'{v:.2f}' for v in locos[:-1])} and {locos[-1]:.2f} of what the best triple keeps. So do "
        f"the attention-reading detectors ({listed(READERS)}: {span(readers)}) and, on the two non-literal kinds, "
        f"{listed(also)} ({', '.join(f'{locos[i]:.2f}' for i in nonliteral)}). Each of their intervals there overlaps "
        f"`locos`'s; on the non-literal answer "
        f"{WORDS[len(same)]} detectors' top {k} are the same set ({', '.join(common)}). Write-side scoring gives no "
        f"advantage here: the heads that read the needle are also the ones that write the answer.")


def organism_necessity(get: Runs) -> str:
    run = get(ORGANISM)
    k = max(run.budgets)
    drop = oracle_shares(run, "necessity", k)
    most = sorted(d for d, v in drop.items() if min(v) > 0.5)
    if most != ["eap-ig"]:
        raise PageError(f"the detectors with most of the best drop on every kind: {most}")
    nonliteral = next(i for i, t in enumerate(run.oracle) if t.task == "organism-nonliteral")
    fam = "ablation:headline"
    eap_l, eap_r = verdict(run, fam, "eap-ig", "locos"), verdict(run, fam, "eap-ig", "random")
    arg_l, arg_r = verdict(run, fam, "locos-argmax", "locos"), verdict(run, fam, "locos-argmax", "random")
    locos = verdict(run, fam, "locos", "random")
    if above(run, fam, "locos", 1) != ["eap-ig", "locos-argmax"] or above(run, fam, "locos", -1):
        raise PageError("the organism's headline verdicts against `locos` changed")
    if sorted(set(unseparated(run, fam, "random"))) != sorted(set(drop) - {"eap-ig", "locos-argmax", "random"}):
        raise PageError("the organism's headline verdicts against random changed")
    singles = [t.rows[[r.detector for r in t.rows].index("eap-ig")].top[0] for t in run.oracle]
    best1 = [t.best["necessity"][1] for t in run.oracle]
    named = sorted({i for i, t in enumerate(run.oracle) if best1[i]["n_sets"] == 1 and singles[i] in best1[i]["sets"]})
    if [run.oracle[i].task for i in named] != ["organism-literal", "organism-nonliteral"]:
        raise PageError("`eap-ig`'s top 1 is no longer the best single head on the two name kinds")
    return bullet(
        f"**The heads whose ablation breaks retrieval (necessity).** No write-side or attention-based detector finds "
        f"the layer-0 pairs: at k = {k} `locos` gets {span(drop['locos'])} of the best drop, no more than random heads "
        f"on the non-literal kind ({pair(drop['locos'][nonliteral], drop['random'][nonliteral])}). Only "
        f"`eap-ig`, which scores every position and so sees the layer-0 heads' indirect effect, finds them "
        f"({span(drop['eap-ig'])}; at k = 1 it names {singles[named[0]]}, the best single head, on the two name "
        f"kinds). The run's own ablation table says the same: on the headline, `eap-ig`'s drop-area is "
        f"{relation(eap_l, '`locos`')}'s and random heads' ({signed3(eap_l)} and {signed3(eap_r)}), `locos-argmax`'s "
        f"too ({signed3(arg_l)} and {signed3(arg_r)}), and `locos` is {relation(locos, 'random heads')} "
        f"({interval(locos, sign=True)}); every other detector is not separable from random heads.")


def pair(a: float, b: float) -> str:
    return f"{a:.3f} each" if f"{a:.3f}" == f"{b:.3f}" else f"{a:.3f} and {b:.3f}"


def signed3(v) -> str:
    return f"{v.difference.value:+.3f}"


def organism_argmax(get: Runs) -> str:
    run = get(ORGANISM)
    k = max(run.budgets)
    drop, kept = oracle_shares(run, "necessity", k), oracle_shares(run, "sufficiency", k)
    return bullet(
        f"`locos-argmax` (the paper's pseudo-code) sits between the two: {span(drop['locos-argmax'])} of the best "
        f"drop and {span(kept['locos-argmax'])} of the best kept effect at k = {k}, on every kind.")


PLANTED_BLOCKS = {
    "planted:truth": (PLANTED, partial(truth_table, name=PLANTED)),
    "planted:bottom-k": (PLANTED, partial(bottom_k, name=PLANTED, coda="On hand-set weights the bottom of the "
                                          "ranking leaves the task intact, as a bottom-k control assumes; against "
                                          "random heads the draws' spread decides.")),
    "planted:ties": (PLANTED, partial(ties, name=PLANTED, why="both retrieval heads tie the read-only decoy")),
    "planted:ablation": (PLANTED, ablation),
    "nonliteral:truth": (NONLITERAL, partial(truth_table, name=NONLITERAL)),
    "nonliteral:bottom-k": (NONLITERAL, partial(
        bottom_k, name=NONLITERAL, coda="On hand-set weights the bottom of the ranking is the null set a bottom-k "
        "control assumes; on gemma3 it is not ([default run](gemma3-default-seed0.md)).")),
    "nonliteral:ties": (NONLITERAL, partial(
        ties, name=NONLITERAL, why="on the non-literal model no attended token is ever the answer, so the "
        "copy-paste score is zero for the true heads by construction, and every head ties at 0")),
    "planted-sufficiency:kept": (PLANTED_SUFF, partial(sufficiency, name=PLANTED_SUFF,
                                                       hides=": a difference precision@2 hides")),
    "planted-sufficiency:steering": (PLANTED_SUFF, partial(steering, name=PLANTED_SUFF, coda=(
        "", " Amplifying the retrieval heads x2 raises the gold log-prob and x0.5 lowers it "
        "(`tests/integration/test_steering.py`)."))),
    "nonliteral-sufficiency:kept": (NONLITERAL_SUFF, partial(sufficiency, name=NONLITERAL_SUFF, hides="")),
    "nonliteral-sufficiency:steering": (NONLITERAL_SUFF, partial(steering, name=NONLITERAL_SUFF,
                                                                 coda=(" either", ""))),
    "organism:shares": (ORGANISM, organism_shares),
    "organism:sufficiency": (ORGANISM, organism_sufficiency),
    "organism:necessity": (ORGANISM, organism_necessity),
    "organism:argmax": (ORGANISM, organism_argmax),
    "organism:limits": (ORGANISM, organism_limits),
    "organism:oracle": (ORGANISM, organism_oracle),
}
