"""The leaderboard's reading notes: the prose under a run's header that says how to read its
tables (intervals, drops and areas, specificity, verdicts and rank sets, ground truth,
selection stability, sufficiency, steering), each filled in with the run's own figures; and
the note on units a run's records lack (`missing_units_note`).

They restate, for a reader of the page, what `docs/methodology.md` defines, and point to it.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from locos_bench.report.rendering.display import fmt
from locos_bench.report.statistics.results import RunStats
from locos_bench.run.plan import ALL_BUDGETS, LARGEST_BUDGET

DEFINITIONS = """\
*How to read the tables.* Each figure is a mean over the task's evaluation examples with a
{level}% {method} bootstrap interval in brackets; the resamples are shared by every detector of
a task, so differences are paired. **drop** = unablated − ablated, per example (positive: the
ablation hurt). **area** = trapezoid area of the metric-vs-log2(k) curve over the budgets,
divided by the log2 range (a log-k weighted mean, in metric units); **drop-area** = the same
for the drop curve. **logp** = the teacher-forced gold-answer log-prob (nats): it keeps
separating detectors when accuracy saturates. {specificity} **vs X** = this detector's drop − X's, per example.
Random rows are resampled in two levels, draws then examples: each resample draws D − 1 of the
D random draws with replacement (D would spread (D − 1)/D as much as the draws do), then the
examples, so random's intervals and every difference with it hold the spread between draws; **±** is the standard deviation of the per-draw means.
Under calibration draws every detector's rows are resampled the same way over its draws.
Retrieval rows are listed by headline drop-area, then logp drop-area; control rows in the run's
order. Cost = scoring seconds and forward passes on the calibration set (mean over draws).
Every definition: `docs/methodology.md`."""


PAIRED_SPECIFICITY = """**specificity**: each control task is evaluated with the heads each retrieval task chose, and
every (retrieval, control) pair compares the same heads. **specificity (logp)**, the primary figure,
= mean over pairs of [gold log-prob drop-area of the retrieval task − that of the control with the
same heads], in nats: it does not saturate. A task's **relative drop** = mean drop-area / mean
unablated value of its headline metric (a ratio of means, not clipped: it saturates at 1 when a head
set removes every correct answer), so tasks in different units average; **specificity (relative)** =
mean over pairs of [relative drop of the retrieval task − relative drop of the control], with a
delta-method interval (Wilson's, combined by MOVER, where the drops are proportions: no example
gains; at most 1 on a rate). A relative figure over a task whose unablated mean is 0 is undefined (its
pairs are left out, noted under the summary); one whose unablated mean is not distinguishable from 0
at its n is shown `[unbounded]`. **control drop-area** = mean over the pairs."""


SEPARABILITY = """\
*Verdicts and ranks* (definitions: `docs/methodology.md`, Separability). The verdicts come from
families the run fixed when it was made (its manifest), never from what this page shows: on
each ranking figure (the mean headline and the mean gold log-prob drop-area over the retrieval
tasks), every detector minus `locos` and minus `random`, with simultaneous {level}% intervals:
the studentised maximum over the family (max-T), from sign flips of the paired per-example
differences (every pattern when there are at most 65,536, else Monte Carlo): a randomization
test of the differences as they are, exact when every pattern is enumerated and no side has
draws; a comparison with draws (`random`'s, or calibration draws) flips its centred
differences (a wild bootstrap) and adds its draws as a Gaussian second level, so its family's
test is approximate. On a rate, a task whose examples show no discordance keeps a moderated
variance instead of claiming none. A pair is separable when its interval excludes 0 (max-T p <
{alpha}); the intervals are the studentised ones at the test's critical value, approximate
away from 0. **rank** is a simultaneous {level}% rank set from every pair on the table's figure
(Mogstad, Romano, Shaikh & Wilhelm 2024): `1–9` says the data place the row anywhere from first
to ninth; rows are listed by point estimate. Each family states its size, its n, its test, the
floor of its p and the differences it can detect at 80% power; where nothing can be separable
at that n it says so and ranks nothing. Control tasks are not ranked. The other intervals in
brackets are marginal: not corrected for the many figures on the page. {heads}"""


HEADS_ONCE = ("Each detector chose its {unit}s once (one calibration draw): every interval is conditional on "
              "the {unit}s it chose; the spread of {unit} selection is not in it (see *Selection stability*).")
HEADS_DRAWN = ("Each detector chose its {unit}s on {r} disjoint calibration subsets: the draws enter its "
               "intervals and verdicts as a second level.")


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
*Selection stability* (B = {b} resamples of each detector's per-example scores, no evaluation):
**n** = the examples its heads were chosen on and the resamples draw from: the calibration
examples it scored, of the {n_calib} drawn (a detector with a correctness gate, as `locos` and
`dla`, scores only those the model answers), or, for a detector that reads no task (`echo`),
its own token sequences. **Jaccard k=K** = mean Jaccard index of the top K on a resample
against the top K on all of them (1 = always the same heads). **Top heads** = each of the top
{k} heads with the share of resamples whose top {k} holds it."""


NO_STABILITY = ("*Selection stability:* not available: these records hold no per-example "
                "calibration scores (runs made before the scores records kept `per_example`).")


SUFFICIENCY = """Sufficiency: each retrieval task evaluated again with **only** a detector's top-k heads
keeping full attention; every other query head is a *streaming head* that attends to its row's first
{sink} tokens and last {window} tokens (DuoAttention's KV compression). **kept − unablated @k** = mean
over examples of the headline metric with those heads full minus unablated (0 = nothing lost; metric
units); **area** = its area over log2(k), the ablation areas' weights; **area (logp, nats)** = the same
for the gold log-prob. These differences are the primary figures. **retained share** = the kept area's
mean over the unablated mean, with Fieller's interval (Wilson's where it is a proportion),
`[unbounded]` when the unablated mean is not
distinguishable from 0 at this n. **floor** = every head streaming. **KV kept** = the share of the
unmodified model's KV cache the full heads keep over the evaluation prompts, counted in key/value
heads: under GQA a KV head stays whole when any of its query heads is full (its other query heads
still stream, so the figure measures the chosen heads alone). **vs r** = area minus r's area, paired
on examples (and draws): marginal in the task tables, simultaneous over the run's family in the
summary (*Verdicts and ranks*)."""


SUFFICIENCY_EXPERTS = """Sufficiency: each retrieval task evaluated again with **only** a detector's top-k
experts kept; every other expert of every layer is mean-ablated (its output replaced by its mean over
the reference tokens routed to it, times the same gate; the routing is untouched). **kept − unablated
@k** = mean over examples of the headline metric with only those experts kept minus unablated (0 =
nothing lost; metric units); **area** = its area over log2(k), the ablation areas' weights; **area
(logp, nats)** = the same for the gold log-prob. These differences are the primary figures.
**retained share** = the kept area's mean over the unablated mean, with Fieller's interval (Wilson's
where it is a proportion). **floor** = every expert mean-ablated. **vs r** = area minus r's area,
paired on examples (and draws): marginal in the task tables, simultaneous over the run's family in
the summary (*Verdicts and ranks*)."""


STEERING = """Steering: every task evaluated again with a detector's top-k heads' outputs scaled by
alpha (amplified for alpha > 1); retrieval tasks with their own heads, controls with each retrieval
task's heads, and each retrieval task's **harder variant** (longer context, more distractors: where
accuracy has room to rise) with its task's heads. **gain @k** = mean of steered minus unablated headline
metric (metric units; positive = it helped); **area** = the gain curve's area over log2(k); **gold gain**
= the same area for the gold log-prob, nats. The summary gives each detector's **retrieval gain**
(mean gain area over retrieval tasks, headline units and nats), **harder gain** (over the variants)
and **control cost** (minus the mean gain area over control pairs; positive = amplification hurt the
control), at the alpha the detector chose on its calibration examples, or at every alpha when the run
did not steer them (choosing on the evaluation examples would be optimistic); **vs r** = retrieval
gain minus r's, simultaneous over the run's family."""



BOTTOM_K = """Bottom-k control: each retrieval task evaluated again with a detector's **bottom-k** heads (the
last k of its ranking, ties broken as for its top k) ablated, beside its top-k heads and random heads
at the same budgets. A detector that ranks heads by what the task needs leaves the task nearly intact
here. **vs random** = drop-area minus random heads' drop-area, paired on examples (and draws; negative:
these heads matter less than random ones); **top-k − bottom-k** = the detector's top-k drop-area minus
its bottom-k drop-area (positive: its top heads matter more than its bottom heads). Marginal in the
task tables; over retrieval tasks, simultaneous over the run's `bottom-k` family."""

AT_LARGEST = """**Controls at k={k} only** (this run, `control_budgets: largest`): control tasks are evaluated
at the largest budget alone, so specificity reads both tasks of a pair at k={k}: every "drop-area" in
the specificity figures above is the drop at k={k} (retrieval and control alike), and **control
drop-area** is the control's drop at k={k}. The retrieval drop-area (over every budget) still ranks
the summary."""


def definitions(run: RunStats) -> str:
    """The *How to read* note, specificity as this run's records define it: a run recorded
    before controls were paired keeps the old rule and its old wording; a run with controls at
    the largest budget only says specificity is read there."""
    paired = any(row.paired for row in run.summary)
    specificity = ("**specificity**: see the next paragraph." if paired else
                   "**specificity** = mean drop-area over retrieval\ntasks − mean drop-area over control tasks.")
    text = DEFINITIONS.format(level=fmt(100 * run.level, 0), method=run.method, specificity=specificity)
    if paired:
        text += "\n\n" + PAIRED_SPECIFICITY
    if paired and at_largest(run.manifest):
        text += "\n\n" + AT_LARGEST.format(k=run.budgets[-1])
    return text


def at_largest(manifest: Any) -> bool:
    """Whether the run evaluated its controls at the largest budget only (`RunPlan.budgets_of`)."""
    return getattr(manifest, "control_budgets", ALL_BUDGETS) == LARGEST_BUDGET


def separability_note(run: RunStats, truth: bool) -> str:
    """The *Verdicts and ranks* note, saying whether the intervals are conditional on the
    heads each detector chose (one calibration draw) or hold their choice (several)."""
    r = run.manifest.calibration_draws
    unit = run.manifest.unit
    heads = HEADS_ONCE.format(unit=unit) if r <= 1 else HEADS_DRAWN.format(r=r, unit=unit)
    text = SEPARABILITY.format(level=fmt(100 * (1 - run.alpha), 0), alpha=fmt(run.alpha, 2), heads=heads)
    if truth:
        text += (" The planted tables are ordered by the ground truth (precision@n, AUROC), which has no "
                 "sampling distribution and is not tested; the rank sets are those of the ablation figures.")
    return textwrap.fill(" ".join(text.split()), width=95, break_long_words=False, break_on_hyphens=False)


def ground_truth_note(run: RunStats, n: int) -> str:
    """The *Ground truth* note of a planted model's run (`n` retrieval heads), saying how this
    run's records break and show ties."""
    seed = run.manifest.tie_seed
    ties = TIES_BY_INDEX if seed is None else TIES_SHOWN.format(seed=seed)
    return GROUND_TRUTH.format(n=n, ties=ties)


def missing_units_note(run_dirs: Sequence[Path | str]) -> str:
    """The *Missing units* section: for each run whose records lack units the page can do
    without (the per-rank diagnostic, shown —), which ones, and a torn last line of its
    `results.jsonl` (a write cut short) that left one out; empty when every run has them all."""
    from locos_bench.run import RunDir, RunPlan

    parts = []
    for path in run_dirs:
        run = RunDir(path)
        done = {u.key: u for u in run.valid_units()}
        plan = RunPlan.from_manifest(run.read_manifest())
        gone = plan.describe([k for k in plan.units() if k not in done and not plan.blocked(k, done)])
        if not gone and run.torn_line is None:
            continue
        text = f"Run `{Path(path).resolve().name}`:"
        if run.torn_line is not None:
            text += (f" line {run.torn_line} of `{RunDir.RESULTS}` is torn (a write cut short: a kill, a full disk) "
                     "and left out.")
        if gone:
            text += f" Missing, shown —: {'; '.join(gone)}. Rerun the run's command to compute them."
        parts.append(text)
    return "## Missing units\n\n" + "\n\n".join(parts) if parts else ""
