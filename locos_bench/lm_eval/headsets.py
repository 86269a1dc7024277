"""Head sets for lm-eval's `heads=` argument, parsed and resolved (imports without lm-eval).

* `DETECTOR@TASK:K` - the detector's top K heads, scored on the fly on TASK's calibration
  split exactly as `locos-bench run --preset P --seed S` would (same split, same seed);
* `L3H1;L7H2` - an explicit list (mean ablation then needs `reference=TASK`);
* `RUN_DIR:DETECTOR@TASK:K` - the top K of the head scores recorded in a run directory.

Mean ablation uses the reference split of the head set's task (or of `reference=`).
`ablation=streaming` turns the set around: its heads are the only full heads and every other
head streams (`streaming_settings`, `interventions.only_full`); `heads=none` then
streams every head (the floor of a sufficiency run).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.names import Head, head_name

_HEAD = re.compile(r"^L(\d+)H(\d+)$")


_SCORED = re.compile(r"^(?:(?P<run>.+):)?(?P<detector>[^:@]+)@(?P<task>[^:@]+):(?P<k>[^:@]+)$")


@dataclass(frozen=True)
class HeadSet:
    """A resolved `heads=` argument.

    Attributes:
        heads: The heads to intervene on, best first.
        task: The task whose reference split gives the mean activations (None: none needed).
        source: How the set was chosen, for lm-eval's results (`locos@kv-retrieval:8`).
        sink: The sink rule of the run the set came from (`RUN_DIR:` heads), else None.
    """

    heads: list[Head]
    task: str | None
    source: str
    sink: str | None = None


def parse_heads(text: str) -> tuple[str, dict[str, Any]]:
    """Split a `heads=` value into its kind (`none`, `list`, `scored`, `run`) and parts."""
    text = (text or "").strip()
    if text.lower() in ("", "none"):
        return "none", {}
    items = [t for t in re.split(r"[;\s]+", text) if t]
    if all(_HEAD.match(t) for t in items):
        return "list", {"heads": list(dict.fromkeys((int(m[1]), int(m[2])) for m in map(_HEAD.match, items)))}
    match = _SCORED.match(text)
    if match is None:
        raise LocosError(
            f"unknown head spec {text!r}; use DETECTOR@TASK:K (locos@niah-literal:16), "
            "an explicit list (L3H1;L7H2) or RUN_DIR:DETECTOR@TASK:K"
        )
    try:
        k = int(match["k"])
    except ValueError:
        raise LocosError(f"head spec {text!r}: K must be a whole number, got {match['k']!r}") from None
    if k < 1:
        raise LocosError(f"head spec {text!r}: K must be at least 1")
    parts = {"detector": match["detector"], "task": match["task"], "k": k}
    if match["run"]:
        return "run", {**parts, "run": match["run"]}
    return "scored", parts


STREAMING = "streaming"
"""The `ablation=` value that keeps the head set full and streams every other head."""


def streaming_settings(ablation: str, kv_sink: Any = None, kv_window: Any = None) -> tuple[int, int] | None:
    """`(sink, window)` of `ablation=streaming` (defaults those of `locos-bench run --kv-sink
    --kv-window`), or None for any other ablation.

    Raises:
        LocosError: `kv_sink` below 0, `kv_window` below 1, either not a whole number, or
            either given with an ablation other than `streaming`.
    """
    if str(ablation).strip() != STREAMING:
        given = [name for name, value in (("kv_sink", kv_sink), ("kv_window", kv_window)) if value is not None]
        if given:
            verb = "apply" if len(given) > 1 else "applies"
            raise LocosError(f"{' and '.join(given)} {verb} only to ablation=streaming (got ablation={ablation})")
        return None
    from locos_bench.run.config import KV_SINK, KV_WINDOW

    values = []
    for name, value, default, low in (("kv_sink", kv_sink, KV_SINK, 0),
                                      ("kv_window", kv_window, KV_WINDOW, 1)):
        if value is None:
            value = default
        elif isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise LocosError(f"{name} must be an integer of at least {low} (got {value!r})")
        values.append(value)
    return values[0], values[1]


def resolve_heads(text: str, model: Any, *, preset: str = "default", seed: int = 0,
                  reference: str | None = None) -> HeadSet:
    """Resolve a `heads=` value against a loaded model (see the module docstring)."""
    kind, parts = parse_heads(text)
    geo = model.geometry
    if kind == "none":
        return HeadSet([], reference, "none")
    if kind == "list":
        for layer, head in parts["heads"]:
            if layer >= geo.n_layers or head >= geo.n_heads:
                raise LocosError(
                    f"head {head_name((layer, head))} is outside the model: {model.name} has "
                    f"{geo.n_layers} layers x {geo.n_heads} heads (L0H0 .. {head_name((geo.n_layers - 1, geo.n_heads - 1))})"
                )
        return HeadSet(parts["heads"], reference, ";".join(head_name(h) for h in parts["heads"]))
    k = parts["k"]
    if k > geo.n_total_heads:
        raise LocosError(f"head spec {text!r}: K={k} is more than the model's {geo.n_total_heads} heads")
    sink = None
    if kind == "run":  # ties broken, and the sink treated, as that run did
        scores, tie_seed, sink = _run_scores(model, **parts)
    else:  # as a `locos-bench run` with this seed would
        scores, tie_seed = _fresh_scores(model, parts, preset, seed), seed
    return HeadSet(scores.ranking(tie_seed=tie_seed)[:k], reference or parts["task"], text.strip(), sink)


def _fresh_scores(model: Any, parts: dict[str, Any], preset: str, seed: int) -> Any:
    """Score heads on the task's calibration split as a `locos-bench run` would."""
    from locos_bench.detectors import detector_names
    from locos_bench.errors import unknown

    if parts["detector"] not in detector_names():
        raise unknown("detector", parts["detector"], detector_names())
    data = _task_data(model, parts["task"], preset=preset)
    if data.spec.kind != "retrieval":
        raise LocosError(f"task {parts['task']!r} is a {data.spec.kind} task: detectors score heads on a retrieval task")
    from locos_bench.detectors import make_detector, run_detector
    from locos_bench.run.keys import UnitKey
    from locos_bench.run.plan import detector_rng

    # The harness's own scoring call and seeding rule (`run.plan.detector_rng`); nothing is written.
    key = UnitKey.scores(data.spec.name, parts["detector"], 0)
    try:
        return run_detector(make_detector(key.detector), model, data.calibration, rng=detector_rng(seed, key))
    except LocosError as exc:
        raise LocosError(f"detector {parts['detector']!r} failed on {parts['task']}: {exc}") from None


def _run_scores(model: Any, *, run: str, detector: str, task: str, k: int) -> tuple[Any, int | None, str]:
    """A run directory's first-draw scores of `detector` on `task`, the run's tie seed and its
    sink rule."""
    from locos_bench.models import canonical_name
    from locos_bench.run import RunDir, ScoresUnit

    run_dir = RunDir(run)
    if not run_dir.exists():
        raise LocosError(f"head spec {run}:{detector}@{task}:{k}: {run} is not a run directory (no manifest.json)")
    manifest = run_dir.read_manifest()
    if canonical_name(manifest.model) != canonical_name(model.name):
        raise LocosError(f"run {run} was made on model {manifest.model!r}, not {model.name!r}: its head indices do not apply")
    units = [u for u in run_dir.read_units() if isinstance(u, ScoresUnit) and u.scores is not None and not u.error]
    for unit in units:
        if (unit.detector, unit.task, unit.draw) == (detector, task, 0):
            return _head_scores(unit), manifest.tie_seed, manifest.sink
    have = sorted({f"{u.detector}@{u.task}" for u in units}) or ["none"]
    raise LocosError(f"run {run} has no head scores for {detector}@{task}; it has: {', '.join(have)}")


def _head_scores(unit: Any) -> Any:
    import torch

    from locos_bench.detectors import HeadScores

    return HeadScores(scores=torch.tensor(unit.scores, dtype=torch.float64), detector=unit.detector)


def _task_data(model: Any, task: str, *, preset: str) -> Any:
    """The harness's splits of `task` in a run of `preset`."""
    from locos_bench.run.splits import SplitSizes, build_task_data
    from locos_bench.tasks import load_task

    sizes = SplitSizes.of_preset(preset)
    return build_task_data(load_task(task), sizes, model)


def ablation_hooks(model: Any, head_set: HeadSet, ablation: str = "mean", *, positionwise: bool = False,
                   sink: str | None = None, preset: str = "default", seed: int = 0) -> list:
    """Forward hooks intervening on `head_set` (mean ablations over its task's reference split;
    `sink` None: the head set's run's rule for `z`, none for a query ablation)."""
    from locos_bench.interventions import AblationSpec, HeadAblation, reference_means
    from locos_bench.tasks.tokenize import tokenize_example

    if sink is None and AblationSpec.parse(ablation).target == "z":
        sink = head_set.sink
    spec = AblationSpec.parse(ablation, positionwise=positionwise, sink=sink)
    if not head_set.heads:
        return []
    means = None
    if spec.needs_reference:
        if head_set.task is None:
            raise LocosError(
                f"heads={head_set.source} with {spec} ablation needs reference=TASK (the task whose "
                "reference split gives the mean activations), or a zero ablation"
            )
        data = _task_data(model, head_set.task, preset=preset)
        ids = [tokenize_example(ex, model.tokenizer).input_ids for ex in data.reference]
        means = reference_means(model, ids, positionwise=spec.positionwise, site=spec.site)
    return HeadAblation(list(head_set.heads), spec, means).hooks()
