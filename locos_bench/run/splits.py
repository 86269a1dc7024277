"""Each task's examples split into disjoint calibration, reference and evaluation sets.

Calibration examples are what detectors score heads on, reference examples give the mean
activations of mean ablation, and evaluation examples are held out for the ablated runs.
They are consecutive index ranges of the task's deterministic example stream, so the same
configuration always picks the same examples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.run.provenance import data_hash
from locos_bench.run.records import TaskEntry
from locos_bench.tasks import Example, TaskSpec, make_examples
from locos_bench.tasks.registry import resolve_tasks
from locos_bench.tasks.tokenize import TokenizedExample, tokenize_example

SPLITS = ("calibration", "reference", "evaluation")


@dataclass
class TaskData:
    """One task of a run with its three splits."""

    spec: TaskSpec
    calibration: list[Example]
    reference: list[Example]
    evaluation: list[Example]

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
            name=self.spec.name, version=self.spec.version, kind=self.spec.kind,
            metrics=list(dict.fromkeys([*self.spec.metrics, "rouge_l", "gold_logprob"])),
            splits={name: [e.index for e in self.split(name)] for name in SPLITS},
            data_hash=data_hash([*self.calibration, *self.reference, *self.evaluation]),
            chance=self.spec.chance,
        )


def build_task_data(spec: TaskSpec, cfg: Any, model: Any) -> TaskData:
    """Disjoint splits by index range: calibration, then reference, then evaluation.

    Args:
        spec: The task.
        cfg: A resolved `RunConfig` (its `n_calib`, `n_ref`, `n_eval`).
        model: The loaded model (generators that need its tokenizer or chat template).
    """
    n_total = cfg.n_calib + cfg.n_ref + cfg.n_eval
    examples = make_examples(spec, n_total, model=model, skip_errors=True)
    if len(examples) < n_total:
        raise LocosError(
            f"task {spec.name!r}: only {len(examples)} usable examples for the requested "
            f"{cfg.n_calib} calibration + {cfg.n_ref} reference + {cfg.n_eval} evaluation"
        )
    c, r = cfg.n_calib, cfg.n_calib + cfg.n_ref
    return TaskData(spec, examples[:c], examples[c:r], examples[r:])


def build_run_tasks(cfg: Any, model: Any) -> tuple[dict[str, TaskData], dict[str, str]]:
    """Every task of a resolved `RunConfig`, by task name, and the synthetic fallbacks taken.

    `--preset paper` prefers the real benchmark of a synthetic task when its data is under
    `cfg.data` (or on a reachable hub); `fallbacks` maps each synthetic task that ran anyway to
    why. Any worker that holds the same configuration builds the same splits.
    """
    specs, fallbacks = resolve_tasks(cfg.tasks, data=cfg.data, prefer_real=cfg.preset == "paper")
    return {spec.name: build_task_data(spec, cfg, model) for spec in specs}, fallbacks
