"""Each task's examples split into disjoint calibration, reference and evaluation sets.

Calibration examples are what detectors score heads on, reference examples give the mean
activations of mean ablation, and evaluation examples are held out for the ablated runs.

Splits are grouped by the underlying item (`Example.item`: a NoLiMa needle,
a MuSiQue question, a BABILong story, a user's row, a generator's fact), so no item is both
calibrated on and evaluated: every example of an item goes to one split. A split may hold
several examples of one item (NoLiMa's test in other books, lengths and depths); another split
never does.

The stream is walked in index order: an example of a new item opens it in calibration until
calibration holds `n_calib` examples, then in reference, then in evaluation; a later example
of an item joins its item's split while that split has room and is set aside otherwise. Where
no item crosses the old index ranges (`[0, n_calib)`, then reference, then evaluation) the
splits are exactly those ranges. Where one does, the walk reads further (up to `LOOKAHEAD`
times the run's size) to replace what it set aside, and calibration and reference may open
only their share of the task's estimated number of items (`_item_caps`): a task that cycles a
small pool (NoLiMa's tests) then gets a few items with several examples each in calibration
and reference, and leaves most items to evaluation. The manifest records each split's exact
example indices.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from locos_bench.errors import LocosError, unknown
from locos_bench.run.manifest import TaskEntry
from locos_bench.run.provenance import data_hash
from locos_bench.tasks import Example, TaskSpec
from locos_bench.tasks.tokenize import TokenizedExample, tokenize_example

if TYPE_CHECKING:
    from locos_bench.run.config import ResolvedConfig

SPLITS = ("calibration", "reference", "evaluation")


@dataclass
class TaskData:
    """One task of a run with its three splits (and any further calibration subsets)."""

    spec: TaskSpec
    calibration: list[Example]
    reference: list[Example]
    evaluation: list[Example]
    more_calibration: list[list[Example]] = field(default_factory=list)
    """Calibration subsets 1..R-1 under `--calibration-draws R` (subset 0 is `calibration`)."""
    variant_of: str | None = None
    """Set on a harder variant of a retrieval task (steering runs): evaluated with that task's
    heads, unablated and steered only."""
    skipped_rows: int = 0
    """Bad rows of its data file set aside (`--skip-bad-rows`; the manifest records them)."""

    def calibration_draw(self, draw: int) -> list[Example]:
        """The calibration subset of a draw (draw mod R)."""
        subsets = [self.calibration, *self.more_calibration]
        return subsets[draw % len(subsets)]

    def split(self, name: str) -> list[Example]:
        if name not in SPLITS:
            raise LocosError(f"unknown split {name!r}; choose from: {', '.join(SPLITS)}")
        return getattr(self, name)

    def tokenized(self, model: Any, split: str) -> list[TokenizedExample]:
        """A split's examples tokenised for `model` (memoised: once per run)."""
        return [tokenize_example(ex, model.tokenizer) for ex in self.split(split)]

    @property
    def entry(self) -> TaskEntry:
        """The task as the manifest records it, with the exact example indices per split."""
        return TaskEntry(
            name=self.spec.name, version=self.spec.version, kind="variant" if self.variant_of else self.spec.kind,
            metrics=list(dict.fromkeys([*self.spec.metrics, "rouge_l", "gold_logprob"])),
            splits={**{name: [e.index for e in self.split(name)] for name in SPLITS},
                    **{_draw_split(d): [e.index for e in part]
                       for d, part in enumerate(self.more_calibration, 1)}},
            data_hash=data_hash([*self.calibration, *self.reference, *self.evaluation,
                                 *(e for part in self.more_calibration for e in part)]),
            chance=self.spec.chance, variant_of=self.variant_of, skipped_rows=self.skipped_rows,
            items=[str(e.item) for e in self.evaluation],
        )


class ExternalControl(ABC):
    """A control task that another harness evaluates (an lm-eval task:
    `locos_bench.lm_eval.LmEvalControl`), the other kind of task a run holds beside `TaskData`.

    It has no examples of its own: the worker asks it for per-example metric values with a head
    set's hooks on (`values`) instead of generating, one head set at a time, and the run's
    position-wise check passes it by. Mean ablation reads `reference`: the reference split of
    the run's first retrieval task, since means need prompts of the heads' own task."""

    reference: list[Example]

    @property
    @abstractmethod
    def spec(self) -> Any:
        """Its `name` and `kind` (`control`), as a `TaskSpec` has them."""

    @property
    @abstractmethod
    def entry(self) -> TaskEntry:
        """The task as the manifest records it."""

    @abstractmethod
    def values(self, model: Any, hooks: list, *, batch_size: int) -> dict[str, list[float]]:
        """Per-example values of each of its metrics with `hooks` active (none: unablated)."""


RunTask = TaskData | ExternalControl
"""A task of a run, as the driver and the worker hold it."""


@dataclass(frozen=True)
class SplitSizes:
    """Examples per split (a `ResolvedConfig` has these fields too)."""

    n_calib: int
    n_ref: int
    n_eval: int
    calibration_draws: int = 1

    @classmethod
    def of_preset(cls, preset: str) -> SplitSizes:
        """The sizes a run of `preset` gives each task."""
        from locos_bench.presets import PRESETS

        if preset not in PRESETS:
            raise unknown("preset", preset, PRESETS)
        sizes = PRESETS[preset]
        return cls(sizes["n_calib"], sizes["n_ref"], sizes["n_eval"], sizes.get("calibration_draws", 1))


def _draw_split(draw: int) -> str:
    return "calibration" if draw == 0 else f"calibration.{draw}"


LOOKAHEAD = 4
"""How far past `n_calib + n_ref + n_eval` (as a multiple of it) the example stream is read
to find enough examples of each split's own items."""


def build_task_data(spec: TaskSpec, cfg: Any, model: Any) -> TaskData:
    """Disjoint splits grouped by item: calibration, then reference, then evaluation.

    Args:
        spec: The task.
        cfg: The sizes: a `SplitSizes`, a `ResolvedConfig` (or anything with `n_calib`,
            `n_ref`, `n_eval` and, optionally, `calibration_draws`).
        model: The loaded model (generators that need its tokenizer or chat template).

    Raises:
        LocosError: an example failed (it is skipped with a warning, and the splits come up
            short), or the task's items are too few for the sizes asked for.
        BadRow: a row of a user's data file is bad, unless `cfg.skip_bad_rows` (then it is
            skipped with a warning and counted in `TaskData.skipped_rows`).
    """
    bad: set[str] = set()
    skip_bad_rows = bool(getattr(cfg, "skip_bad_rows", False))
    draws = int(getattr(cfg, "calibration_draws", None) or 1)
    n_calib = cfg.n_calib if spec.calibration is None or spec.calibration.size is None else spec.calibration.size
    sizes = {**{_draw_split(d): n_calib for d in range(draws)}, "reference": cfg.n_ref,
             "evaluation": cfg.n_eval}
    n_total = sum(sizes.values())
    window = n_total
    examples, ended = _read(spec, window, 0, model, skip_bad_rows, bad)
    caps: dict[str, float] = dict.fromkeys(sizes, math.inf)
    while True:
        parts = assign_splits(examples, sizes, caps)
        missing = sum(sizes[name] - len(parts[name]) for name in sizes)
        if not missing:
            if spec.for_calibration() is not spec:
                parts.update(_calibration_stream(spec, {n: parts[n] for n in sizes if n.startswith("calibration")},
                                                 model, skip_bad_rows, bad))
            return TaskData(spec, parts["calibration"], parts["reference"], parts["evaluation"],
                            [parts[_draw_split(d)] for d in range(1, draws)], skipped_rows=len(bad))
        if ended is not None or window >= LOOKAHEAD * n_total:
            if draws > 1:
                n_items = len({e.item for e in examples})
                raise LocosError(
                    f"task {spec.name!r}: --calibration-draws {draws} needs {draws} disjoint calibration "
                    f"subsets of {cfg.n_calib} examples, none sharing an item ({draws * cfg.n_calib} "
                    f"examples), besides {cfg.n_ref} reference and {cfg.n_eval} evaluation; its first "
                    f"{len(examples)} examples hold {n_items} distinct items: ask for fewer draws or "
                    "fewer calibration examples")
            raise LocosError(_shortfall(spec, sizes, examples, parts, window, ended))
        if window == n_total:  # items repeat across the index ranges: share them out
            caps = _item_caps(examples, sizes)
        grown = min(LOOKAHEAD * n_total, window + missing)
        more, ended = ([], ended) if ended is not None else _read(spec, grown - window, window, model,
                                                                  skip_bad_rows, bad)
        examples += more
        window = grown


def _read(spec: TaskSpec, n: int, start: int, model: Any, skip_bad_rows: bool,
          bad: set[str]) -> tuple[list[Example], int | None]:
    """Examples `start .. start+n-1`, each failing one skipped with a warning (a bad row of a
    user's file only with `skip_bad_rows`, added to `bad`), and where the task's data ended
    (its number of examples; None: it did not)."""
    import warnings

    from locos_bench.tasks.examples import read_examples
    from locos_bench.tasks.reading import BadRow

    examples, skipped, ended = read_examples(spec, n, start=start, model=model, skip_errors=True,
                                             skip_bad_rows=skip_bad_rows)
    for error in skipped:
        bad.update([str(error)] if isinstance(error, BadRow) else [])
        warnings.warn(f"skipped: {error}", stacklevel=3)
    return examples, ended


def _calibration_stream(spec: TaskSpec, parts: dict[str, list[Example]], model: Any, skip_bad_rows: bool,
                        bad: set[str]) -> dict[str, list[Example]]:
    """The calibration subsets drawn again from the task's calibration stream
    (`TaskSpec.for_calibration`: its own grid and source arguments), each on the items the
    task's own stream gave it: as many examples as before, so no item crosses a split."""
    cal = spec.for_calibration()
    owner = {e.item: name for name, part in parts.items() for e in part}
    wanted = {name: len(part) for name, part in parts.items()}
    out: dict[str, list[Example]] = {name: [] for name in parts}
    total, start = sum(wanted.values()), 0
    limit = LOOKAHEAD * total * max(1, len(owner))  # the subsets' items are a share of the stream's
    while any(len(out[n]) < wanted[n] for n in out) and start < limit:
        chunk, _ = _read(cal, min(total, limit - start), start, model, skip_bad_rows, bad)
        start += min(total, limit - start)
        for ex in chunk:
            name = owner.get(ex.item)
            if name is not None and len(out[name]) < wanted[name]:
                out[name].append(ex)
    short = {n: f"{len(out[n])} of {wanted[n]}" for n in out if len(out[n]) < wanted[n]}
    if short:
        raise LocosError(f"task {spec.name!r}: its calibration stream gave too few examples of the calibration "
                         f"items ({', '.join(f'{n}: {v}' for n, v in short.items())}) in its first {start}")
    return out


def assign_splits(examples: list[Example], sizes: dict[str, int],
                  caps: dict[str, float] | None = None) -> dict[str, list[Example]]:
    """Walk the stream: an example of a new item opens it in the first split that is neither
    full nor at its item cap; an example of a known item joins that item's split if it has
    room, and is set aside otherwise.

    Args:
        examples: The stream's examples, in index order.
        sizes: Examples wanted per split, by split name (`SPLITS` order).
        caps: The most items each split may hold (none by default).

    Returns:
        Each split's examples, in stream order; a split comes up short when the examples run
        out.
    """
    order = list(sizes)  # SPLITS, with any further calibration subsets after `calibration`
    caps = caps or dict.fromkeys(order, math.inf)
    owner: dict[str, str] = {}
    parts: dict[str, list[Example]] = {name: [] for name in order}
    n_items = dict.fromkeys(order, 0)
    for ex in examples:
        key = ex.item
        split = owner.get(key)
        if split is None:
            split = next((name for name in order
                          if len(parts[name]) < sizes[name] and n_items[name] < caps[name]), None)
            if split is None:
                continue
            owner[key] = split
            n_items[split] += 1
        if len(parts[split]) < sizes[split]:
            parts[split].append(ex)
    return parts


def _item_caps(examples: list[Example], sizes: dict[str, int]) -> dict[str, float]:
    """Item caps for calibration and reference: their shares of the task's estimated number
    of items, so a small pool (NoLiMa's tests) leaves most items to evaluation.

    The pool is estimated from the distinct items among `examples`: the size `m` of a pool
    whose uniform draws would show that many, `m * (1 - (1 - 1/m)**n) = distinct`. A stream
    that cycles its pool shows it whole; a large pool gets caps above the sizes (no cap).
    """
    n, distinct = len(examples), len({e.item for e in examples})
    pool = math.inf
    if distinct < n:
        lo, hi = float(distinct), float(distinct)
        while hi * (1 - (1 - 1 / hi) ** n) < distinct:
            hi *= 2
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if mid * (1 - (1 - 1 / mid) ** n) < distinct else (lo, mid)
        pool = hi
    total = sum(sizes.values())
    order = list(sizes)
    caps: dict[str, float] = {name: max(1, round(pool * sizes[name] / total)) if pool < math.inf else math.inf
                              for name in order[:-1]}
    return {**caps, order[-1]: math.inf}


def _shortfall(spec: TaskSpec, sizes: dict[str, int], examples: list[Example],
               parts: dict[str, list[Example]], window: int, ended: int | None = None) -> str:
    wanted = f"{sizes['calibration']} calibration + {sizes['reference']} reference + {sizes['evaluation']} evaluation"
    if ended is not None and ended < sum(sizes.values()):
        return f"task {spec.name!r} has {ended} examples (its data ends there), too few for the requested {wanted}"
    window = window if ended is None else ended
    failed = window - len(examples)
    if failed:
        dropped = len(examples) - sum(len(p) for p in parts.values())
        aside = f"; {dropped} more repeat items of a full split" if dropped else ""
        return (f"task {spec.name!r}: only {len(examples)} usable examples of the first {window} "
                f"({failed} skipped: see the warnings{aside}) for the requested {wanted}")
    n_items = len({e.item for e in examples})
    got = ", ".join(f"{name} {len(parts[name])} from {len({e.item for e in parts[name]})} items"
                    for name in SPLITS)
    return (f"task {spec.name!r}: too few distinct items for the requested {wanted} examples: "
            f"its first {window} examples hold {n_items} distinct items, every item's examples stay "
            f"in one split, and each split needs at least one item of its own (got {got}); "
            f"ask for fewer examples or give the task more items")


def build_run_tasks(cfg: ResolvedConfig, model: Any) -> dict[str, TaskData]:
    """Every task of a run (`ResolvedConfig.specs`: its tasks, then their harder variants),
    split, by task name. Any worker that holds the same configuration builds the same splits."""
    variants = dict(cfg.variants)
    tasks = {}
    for spec in cfg.specs:
        tasks[spec.name] = build_task_data(spec, cfg, model)
        tasks[spec.name].variant_of = variants.get(spec.name)
    return tasks


def check_tasks_fit(cfg: ResolvedConfig, model: Any, tasks: dict[str, Any]) -> list[str]:
    """The run's tasks against what the model can do under its settings, before any unit runs.

    Refuses (`LocosError`) a sufficiency run the model cannot stream (an eager attention path,
    an architecture the lean path does not take) or whose window exceeds its context. Returns
    warnings: under `--positionwise`, evaluation prompt tokens past the reference prompts (a
    flat mean there; a reference split too short refuses); under `--sufficiency`, a retrieval
    task whose every evaluation prompt fits the sinks and window (streaming changes nothing).
    """
    from locos_bench.interventions import check_positionwise_reference, only_full
    from locos_bench.models.heads import context_length

    warnings = []
    if cfg.positionwise:
        for name, data in tasks.items():
            if isinstance(data, ExternalControl):  # its prompts are another harness's
                continue
            prompts = [t.prompt_len for t in data.tokenized(model, "evaluation")]
            flat = check_positionwise_reference(name, [t.n_tokens for t in data.tokenized(model, "reference")], prompts)
            if flat:
                warnings.append(f"--positionwise: {flat} of {sum(prompts)} evaluation prompt tokens of {name} lie "
                                "past its reference prompts (flat mean there)")
    if cfg.sufficiency:
        sink, window = cfg.kv_sink, cfg.kv_window
        longest = context_length(model)
        if longest is not None and window > longest:
            raise LocosError(f"--kv-window {window} is longer than {cfg.model}'s context of {longest} tokens")
        try:
            with only_full(model.bridge, [], sink=sink, window=window):
                pass
        except LocosError as exc:
            raise LocosError(f"--sufficiency: {exc}") from None
        for name, data in tasks.items():
            if data.spec.kind != "retrieval":
                continue
            prompts = [t.prompt_len for t in data.tokenized(model, "evaluation")]
            if prompts and max(prompts) <= sink + window:
                warnings.append(f"--sufficiency: every evaluation prompt of {name} fits {sink} sink + {window} "
                                "window tokens, so streaming changes nothing there")
    return warnings
