"""The leaderboard's reading notes: the prose under a run's header that says how to read its
tables (intervals, drops and areas, specificity, ties and the Holm family, ground truth,
selection stability, sufficiency, steering), each filled in with the run's own figures.

They restate, for a reader of the page, what `docs/methodology.md` defines.
"""

from __future__ import annotations

import textwrap

from locos_bench.report.display import fmt
from locos_bench.report.results import RunStats

DEFINITIONS = """\
*How to read the tables.* Each figure is a mean over the task's evaluation examples with a
{level}% {method} bootstrap interval in brackets; the resamples are shared by every detector of
a task, so differences are paired. **drop** = unablated − ablated, per example (positive: the
ablation hurt). **area** = trapezoid area of the metric-vs-log2(k) curve over the budgets,
divided by the log2 range (a log-k weighted mean, in metric units); **drop-area** = the same
for the drop curve. **logp** = the teacher-forced gold-answer log-prob (nats): it keeps
separating detectors when accuracy saturates. {specificity} **vs X** = this detector's drop − X's, per example.
Random rows are resampled in two levels, draws then examples: each resample draws the random
draws with replacement, then the examples, so random's intervals and every difference with it
(**vs random**, the rank tests) hold the spread between draws; **±** is the standard deviation
of the per-draw means. Under calibration draws every detector's rows are resampled the same
way over its draws. Rows are ranked by headline drop-area, then logp drop-area. Cost = scoring
seconds and forward passes on the calibration set (mean over draws)."""


PAIRED_SPECIFICITY = """**specificity**: each control task is evaluated with the heads each retrieval task chose, and
every (retrieval, control) pair compares the same heads. A task's **relative drop** =
drop-area / unablated value of its headline metric (on a rate such as contains, number_match,
f1: clipped to [0, 1]; 1 = all of the task's accuracy removed), so tasks in different units
average; undefined, and its pairs left out (noted under the summary), when the unablated value
is 0. **specificity** = mean over pairs of [relative drop of the retrieval task − relative drop
of the control with the same heads]; **specificity (logp)** = the same pairs' gold-log-prob
drop-areas, retrieval − control, in nats (not normalised). **control drop-area** = mean over
the pairs."""


SEPARABILITY = """\
*Ties.* A rank marked `=` (e.g. `=2`) is shared by adjacent rows whose order is not
separable. Each pair of adjacent ranked rows is tested on the figure that ordered it (the
first ranking figure on which they differ) with a two-sided paired bootstrap p-value from the
resamples of the intervals, p = 2·min(1 + #(d* ≤ 0), 1 + #(d* ≥ 0)) / (B + 1), capped at 1.
Holm's step-down correction runs over **the family of every adjacent-pair comparison this
leaderboard tests**: {family}. A pair is separable when its Holm-adjusted p < {alpha}. Ranks
are competition ranks: a row not separable from the row above shares its rank, and the next
row's rank counts every row above it (1, =2, =2, 4); only adjacent rows are compared, so a tie
can chain across rows that would differ. Rows whose ranking figures are all equal tie without
a test; failed rows are not ranked. Random rows enter resampled in two levels (draws, then
examples), as in **vs random**."""


GROUND_TRUTH = """\
*Ground truth.* This model is planted: its retrieval heads are known by construction, so
each detector's ranking is checked against them, and the tables of this run are ranked by
**precision@{n}** (share of the {n} retrieval heads among the detector's top {n}), then
**AUROC** (probability that a retrieval head outscores another head; 0.5 = chance), then the
ablation figures, which also reward heads the task needs upstream of retrieval. **prec. k=K**
= retrieval heads among the top K, over K. The other columns give each head's rank in the
detector's ranking (1 = best; {ties}): the decoys should rank below the
retrieval heads; the upstream heads are necessary but do not retrieve. Random: mean over draws."""


TIES_BY_INDEX = "ties broken by layer, head"
"""How a run recorded before tie seeds broke ties (its manifest has no `tie_seed`)."""


TIES_SHOWN = ("**=R**: the head's score equals other heads' exactly, and R is the best rank of "
              "that tied group; a group across a precision's cut-off counts by its expected share "
              "over every order of the group, as AUROC counts ties one half, while the ablated "
              "heads are the order drawn from the run's tie seed, {seed}")
"""How a run with a tie seed shows a tie: the shared best rank, marked `=`."""


STABILITY = """\
*Selection stability* (heads chosen on {n_calib} calibration examples; B = {b} resamples of
them, no evaluation): **Jaccard k=K** = mean Jaccard index of the top K on a resample against
the top K on all of them (1 = always the same heads). **Top heads** = each of the top {k}
heads with the share of resamples whose top {k} holds it."""


NO_STABILITY = ("*Selection stability:* not available: these records hold no per-example "
                "calibration scores (runs made before the scores records kept `per_example`).")


ADJACENT = "Adjacent ranks: is the order separable? (Holm over the leaderboard's family; see *Ties*)"


SUFFICIENCY = """Sufficiency: each retrieval task evaluated again with **only** a detector's top-k heads
keeping full attention; every other query head is a *streaming head* that attends to its row's first
{sink} tokens and last {window} tokens (DuoAttention's KV compression). **retained @k** = mean
headline metric over the unablated mean (1 = nothing lost; not clipped); **area** = the retained curve's
area over log2(k), the ablation areas' weights; **floor** = every head streaming. **KV kept** = the share
of the unmodified model's KV cache the full heads keep over the evaluation prompts, counted in
key/value heads: under GQA a KV head stays whole when any of its query heads is full (its other query
heads still stream, so the figure measures the chosen heads alone). **vs r** = area minus r's area,
paired on examples (and draws); positive = the detector's heads carry more of the task. **gold loss**
= area of the gold log-prob lost, nats. 95% intervals as above; resamples
whose unablated mean is 0 (no ceiling) are left out of a ratio's interval."""


STEERING = """Steering: every task evaluated again with a detector's top-k heads' outputs scaled by
alpha (amplified for alpha > 1); retrieval tasks with their own heads, controls with each retrieval
task's heads, and each retrieval task's **harder variant** (longer context, more distractors: where
accuracy has room to rise) with its task's heads. **gain @k** = mean of steered minus unablated headline
metric (metric units; positive = it helped); **area** = the gain curve's area over log2(k); **gold gain**
= the same area for the gold log-prob, nats. The summary takes each detector's **best alpha** (largest
mean relative gain over retrieval tasks and variants; chosen on the evaluation examples, so
optimistic): **retrieval gain** and **harder gain** = mean over those tasks of gain area over the
unablated mean; **control cost** = minus the same over control pairs (positive = amplification hurt
the control); **vs random** = retrieval gain minus random's at that alpha, paired. 95% intervals (a resample
with an unablated mean of 0 is left out of a relative figure)."""


def definitions(run: RunStats) -> str:
    """The *How to read* note, specificity as this run's records define it: a run recorded
    before controls were paired keeps the old rule and its old wording."""
    paired = any(row.paired for row in run.summary)
    specificity = ("**specificity**: see the next paragraph." if paired else
                   "**specificity** = mean drop-area over retrieval\ntasks − mean drop-area over control tasks.")
    text = DEFINITIONS.format(level=fmt(100 * run.level, 0), method=run.method, specificity=specificity)
    return text + "\n\n" + PAIRED_SPECIFICITY if paired else text


def separability_note(run: RunStats, truth: bool) -> str:
    """The *Ties* note: the Holm family this run's ranks were corrected in (its size and the
    runs it spans), and a warning when B is too small for any pair to separate."""
    m = run.holm_family
    scope = "of every run" if run.family_runs > 1 else "of this run"
    family = (f"{m} comparisons, the adjacent rows of each task table and of the summary ranking "
              f"(its two tables share one order) {scope}")
    text = SEPARABILITY.format(family=family, alpha=fmt(run.alpha, 2))
    if truth:
        text += (" Pairs ordered by a ground-truth figure (precision@n, AUROC) are not tested (it "
                 "has no bootstrap distribution) and keep separate ranks.")
    b = run.n_resamples
    if m and 2 * m / (b + 1) >= run.alpha:
        need = int(2 * m / run.alpha)
        while 2 * m / (need + 1) >= run.alpha:
            need += 1
        text += (f" **With B = {b} no pair can be separated:** the smallest p, 2 / (B + 1), times "
                 f"{m} is not below {fmt(run.alpha, 2)}; rerun with `--n-resamples {need}` or more.")
    return textwrap.fill(" ".join(text.split()), width=95, break_long_words=False, break_on_hyphens=False)


def ground_truth_note(run: RunStats, n: int) -> str:
    """The *Ground truth* note of a planted model's run (`n` retrieval heads), saying how this
    run's records break and show ties."""
    seed = run.manifest.tie_seed
    ties = TIES_BY_INDEX if seed is None else TIES_SHOWN.format(seed=seed)
    return GROUND_TRUTH.format(n=n, ties=ties)
