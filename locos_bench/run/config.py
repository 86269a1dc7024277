"""Run configuration: the user's flags (`RunConfig`) and the frozen configuration resolved from
them once (`ResolvedConfig`: filled from a preset, `locos_bench.presets`, checked, the
ablation parsed), which every later step of a run reads.

Free of torch on import, so the CLI can list and check configurations fast.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from locos_bench.errors import LocosError, unknown
from locos_bench.presets import PRESETS
from locos_bench.run.plan import ALL_BUDGETS, CONTROL_BUDGETS

if TYPE_CHECKING:
    from locos_bench.interventions import AblationSpec
    from locos_bench.tasks import TaskSpec


DEFAULT_ABLATION = "mean"
"""The ablation of a run whose flags and preset name none."""


@dataclass
class RunConfig:
    """Everything that defines a run, as the user gives it (the CLI flags); `resolved()` turns
    it into the `ResolvedConfig` a run reads. A run never changes it."""

    model: str = "gemma3"
    detectors: list[str] = field(default_factory=lambda: ["all"])
    preset: str = "default"
    tasks: list[str] | None = None
    budgets: list[int] | None = None
    ablation: str | None = None
    """`mean`, `zero`, `scale:ALPHA`, `mean-q` or `zero-q` (`interventions.AblationSpec`); None:
    the preset's, else `DEFAULT_ABLATION`."""
    positionwise: bool = False
    sink: str | None = None
    """What mean ablation writes at a BOS sink: `keep` or `mean` (`interventions.ablation`);
    None: `interventions.DEFAULT_SINK`."""
    n_calib: int | None = None
    n_ref: int | None = None
    n_eval: int | None = None
    random_draws: int | None = None
    random_seed: int | None = None
    """The seed of the `random` detector's draw 0 (draw d: `random_seed + d`), drawn as the
    LOCOS authors draw random heads (Python's `random.Random(seed).sample`); None: every
    stochastic detector's draws come from `seed` (`run.plan.detector_rng`). The paper preset
    sets 42 (the authors' seeds 42, 43, 44 are draws 0-2)."""
    calibration_draws: int | None = None
    """R disjoint calibration subsets of `n_calib` examples each (None: the preset's, else 1):
    every detector chooses heads on each and each choice is evaluated; the report resamples
    the draws, then the examples."""
    rank_diagnostic: int | None = None
    seed: int = 0
    output_dir: Path | None = None
    device: str = "cpu"
    dtype: str | None = None
    """None: bfloat16 on CUDA, float32 on CPU."""
    batch_size: int | None = None
    """None: chosen from free memory on CUDA, 4 on CPU (the manifest says which)."""
    eval_head_sets: int = 4
    """Head sets of a task whose generation shares its decoding steps (each set's prefill runs
    alone, from its lowest ablated layer; `evaluation.evaluate_head_sets`). A CPU decoding step
    costs about as much for 16 rows as for 4 (0.47 s against 0.33 s on gemma3, 2 cores), so 4
    sets x 4 examples took 82 s where one set at a time took 126 s (niah-literal, 8 sets, 8
    examples, identical generations); 1: one at a time."""
    force: bool = False
    retry_failed: bool = False
    """Resuming, compute again the units recorded with an error."""
    skip_bad_rows: bool = False
    """Skip a bad row of a user's data file with a warning (the manifest counts them) instead
    of failing on it (`tasks.reading.BadRow`)."""
    quiet: bool = False
    explain: int = 0
    """Write explain pages for the first N evaluation examples of each retrieval task."""
    lm_eval_tasks: list[str] = field(default_factory=list)
    """lm-eval tasks (names or YAML files) evaluated as controls with each retrieval task's heads."""
    data: Path | None = None
    """Local datasets (`DATA/<task>`); `--preset paper` uses a real benchmark found there."""
    sufficiency: bool | None = None
    """Also evaluate each retrieval task with only each detector's top-k heads full and every
    other head streaming (`kv_sink` first and `kv_window` last tokens; DuoAttention's KV
    compression). None: the preset's (on in `paper`, off elsewhere)."""
    kv_sink: int | None = None
    """First tokens a streaming head keeps (None: 4); only with `sufficiency`."""
    kv_window: int | None = None
    """Last tokens a streaming head keeps (None: 64); only with `sufficiency`."""
    steer_alphas: list[float] | None = None
    """Amplifications: every task evaluated again with each detector's top-k heads' outputs
    scaled by each alpha (> 0, not 1), plus each retrieval task's harder variant
    (`TaskSpec.harder`) with that task's heads. None: the preset's (none)."""
    variants: dict[str, str] = field(default_factory=dict)
    """Not read: the harder variants a run steers are resolved from its tasks
    (`ResolvedConfig.variants`)."""
    bottom_k: list[str] | None = None
    """Detectors whose bottom-k heads (the last k of each ranking) each retrieval task also
    ablates, at every budget: names, `all` (every deterministic detector of the run) or
    `none`. None: the preset's (those of the run's detectors it names), else none."""
    control_budgets: str | None = None
    """Budgets at which control tasks are evaluated (`CONTROL_BUDGETS`): `all`, or `largest`
    (the largest budget only; specificity is then read at that budget). None: the preset's,
    else `all`."""
    unit: str = "head"
    """What detectors rank and budgets count (`detectors.UNITS`): attention heads, or a mixture
    of experts' experts `(layer, expert)`, ablated by `mask` or `mean` (`interventions.experts`)."""

    def resolved(self) -> ResolvedConfig:
        """The run these flags name, resolved once: unset fields filled from the preset, every
        name and size checked, the ablation parsed. Whatever cannot run fails here, in one
        line, before any model loads."""
        if self.preset not in PRESETS:
            raise unknown("preset", self.preset, PRESETS)
        defaults = dict(PRESETS[self.preset])
        from locos_bench.models.aliases import MODELS

        if self.model in MODELS and MODELS.get(self.model).tasks:  # a toy vocabulary speaks only its own
            defaults["tasks"] = list(MODELS.get(self.model).tasks)
        cfg = replace(self, **{k: (getattr(self, k) if getattr(self, k) is not None else v) for k, v in defaults.items()})
        calibration_draws = 1 if cfg.calibration_draws is None else cfg.calibration_draws
        kv_sink, kv_window = _streaming(cfg)
        alphas = _check_alphas(cfg.steer_alphas or [])
        _check_unit(cfg)
        detectors = _resolve_detectors(cfg.detectors, cfg.preset, cfg.unit)
        from locos_bench.run.plan import need_retrieval
        from locos_bench.tasks import load_task, resolve_tasks, spec_tokens

        # Unknown names fail here, with did-you-mean; `--preset paper` takes a real benchmark
        # whose data is found in place of its synthetic twin.
        specs, fallbacks = resolve_tasks(list(cfg.tasks), data=cfg.data, prefer_real=cfg.preset == "paper")
        need_retrieval(spec.kind for spec in specs)
        variants: dict[str, str] = {}
        if alphas:
            for spec in specs:
                if spec.kind == "retrieval" and spec.harder and spec.harder not in cfg.tasks:
                    variants.setdefault(spec.harder, spec.name)
        variant_specs = [load_task(name) for name in variants]
        variants = {harder.name: variants[name] for name, harder in zip(variants, variant_specs)}
        for label, value, low in (("--n-calib", cfg.n_calib, 1), ("--n-ref", cfg.n_ref, 1),
                                  ("--n-eval", cfg.n_eval, 2), ("--random-draws", cfg.random_draws, 1),
                                  ("--calibration-draws", calibration_draws, 1),
                                  ("--batch-size", cfg.batch_size, 1), ("--rank-diagnostic", cfg.rank_diagnostic, 0),
                                  ("--explain", cfg.explain, 0), ("eval_head_sets", cfg.eval_head_sets, 1)):
            if value is not None and value < low:
                raise LocosError(f"{label} must be at least {low} (got {value})")
        if isinstance(cfg.seed, bool) or not isinstance(cfg.seed, int) or cfg.seed < 0:
            raise LocosError(f"--seed must be a whole number of at least 0 (got {cfg.seed})")
        if cfg.data is not None and not Path(cfg.data).is_dir():
            why = "not a folder" if Path(cfg.data).exists() else "no such folder"
            raise LocosError(f"--data {cfg.data}: {why} (it holds DATA/<task> in each release's layout)")
        if not cfg.budgets or any(k < 1 for k in cfg.budgets):
            raise LocosError(f"--budgets must be positive integers (got {cfg.budgets})")
        bottom_k = _resolve_bottom_k(cfg.bottom_k or [], detectors, given=self.bottom_k is not None)
        control_budgets = cfg.control_budgets or ALL_BUDGETS
        if control_budgets not in CONTROL_BUDGETS:
            raise unknown("--control-budgets value", control_budgets, CONTROL_BUDGETS)
        from locos_bench.interventions import AblationSpec  # torch: only once the names are checked

        if cfg.unit == "expert":
            ablation = AblationSpec.expert(cfg.ablation or DEFAULT_ABLATION)
        else:
            ablation = AblationSpec.parse(cfg.ablation or DEFAULT_ABLATION, positionwise=cfg.positionwise, sink=cfg.sink)
        output_dir = cfg.output_dir
        if output_dir is None:
            output_dir = Path("runs") / f"{cfg.model.replace('/', '_')}-{cfg.preset}-seed{cfg.seed}"
        check_output_dir(Path(output_dir))
        return ResolvedConfig(
            model=cfg.model, preset=cfg.preset, detectors=tuple(detectors), tasks=tuple(cfg.tasks),
            specs=(*specs, *variant_specs), fallbacks=tuple(fallbacks.items()),
            context_tokens=max(map(spec_tokens, specs)), variants=tuple(variants.items()),
            budgets=tuple(sorted(set(cfg.budgets))), ablation=ablation,
            n_calib=cfg.n_calib, n_ref=cfg.n_ref, n_eval=cfg.n_eval, random_draws=cfg.random_draws,
            random_seed=cfg.random_seed, calibration_draws=calibration_draws, rank_diagnostic=cfg.rank_diagnostic, seed=cfg.seed,
            output_dir=Path(output_dir), device=cfg.device, dtype=cfg.dtype, batch_size=cfg.batch_size,
            eval_head_sets=cfg.eval_head_sets, force=cfg.force, quiet=cfg.quiet, explain=cfg.explain,
            lm_eval_tasks=tuple(cfg.lm_eval_tasks), data=None if cfg.data is None else Path(cfg.data),
            sufficiency=bool(cfg.sufficiency),
            kv_sink=kv_sink, kv_window=kv_window, steer_alphas=tuple(alphas), bottom_k=tuple(bottom_k),
            control_budgets=control_budgets, default_dir=cfg.output_dir is None, retry_failed=cfg.retry_failed,
            skip_bad_rows=cfg.skip_bad_rows, unit=cfg.unit,
        )


@dataclass(frozen=True)
class ResolvedConfig:
    """A run's configuration, resolved once (`RunConfig.resolved`) and read by every step
    after: the driver, the worker, the executors (a Ray actor gets it as JSON), the splits,
    the manifest. Frozen: nothing changes it; what the loaded model decides (the batch size,
    budgets capped at its heads) comes in a new one from `for_model`, once per run.

    Fields are `RunConfig`'s, filled and checked (lists become tuples), except `ablation`,
    which is the parsed `interventions.AblationSpec` (its `positionwise` and `sink`
    folded in), and the model's facts below."""

    model: str
    preset: str
    detectors: tuple[str, ...]
    tasks: tuple[str, ...]
    """The task names (or YAML paths) as given."""
    specs: tuple[TaskSpec, ...]
    """Every task the run evaluates, resolved: `tasks` (under `--preset paper` a synthetic
    twin's real benchmark where its data is found), then the harder `variants`."""
    fallbacks: tuple[tuple[str, str], ...]
    """(synthetic task run in place of its real benchmark, why), `--preset paper` only."""
    context_tokens: int
    """The longest prompt plus answer of `tasks`, in tokens: what model memory is planned for."""
    variants: tuple[tuple[str, str], ...]
    """(harder variant, the retrieval task whose heads it is steered with), in task order."""
    budgets: tuple[int, ...]
    """Increasing; at most the model's heads once bound to it (`for_model`)."""
    ablation: AblationSpec
    n_calib: int
    n_ref: int
    n_eval: int
    random_draws: int
    random_seed: int | None
    calibration_draws: int
    rank_diagnostic: int
    seed: int
    output_dir: Path
    device: str
    dtype: str | None
    batch_size: int | None
    """None until bound to a model when the flags left it unset."""
    eval_head_sets: int
    force: bool
    quiet: bool
    explain: int
    lm_eval_tasks: tuple[str, ...]
    data: Path | None
    sufficiency: bool
    kv_sink: int
    kv_window: int
    steer_alphas: tuple[float, ...]
    bottom_k: tuple[str, ...] = ()
    """Detectors whose bottom-k heads are also ablated (deterministic ones of `detectors`)."""
    control_budgets: str = "all"
    """`all` or `largest`: the budgets control tasks are evaluated at (`RunPlan.budgets_of`)."""
    batch_size_chosen: str | None = None
    """How `for_model` chose the batch size (`4 (cpu default)`); None when it was given. The
    manifest's `model_info` records it."""
    budgets_capped_at: int | None = None
    """The model's head count, where budgets above it were capped to it (`for_model`)."""
    default_dir: bool = False
    """`output_dir` is the default name (no `--output-dir`): a run of another configuration
    then goes to a directory of its own beside it instead of being refused."""
    retry_failed: bool = False
    """Resuming, compute again the units recorded with an error (a fixed detector, a lost
    worker); otherwise a failed unit counts as done."""
    skip_bad_rows: bool = False
    """A bad row of a user's data file is skipped (and counted) rather than fatal."""
    unit: str = "head"
    """`head` or `expert`: what the run's detectors rank and its budgets count."""

    @property
    def positionwise(self) -> bool:
        return self.ablation.positionwise

    @property
    def sink(self) -> str:
        return self.ablation.sink

    def resolved(self) -> ResolvedConfig:
        """Itself: resolving a resolved configuration changes nothing."""
        return self

    def for_model(self, model: Any) -> ResolvedConfig:
        """This configuration bound to the loaded model: a batch size chosen from its memory
        (`LoadedModel.batch_size_for`) where none was given, and a budget above its number of
        heads capped to it (every head ablated). Two budgets that would both become the head
        count are refused (`LocosError`): the curve would hold one point twice; so is a rank
        diagnostic of more heads than it has. Binding a bound configuration again returns it
        unchanged."""
        changes: dict[str, Any] = {}
        if self.batch_size is None:
            size, why = model.batch_size_for(self.context_tokens)
            changes.update(batch_size=size, batch_size_chosen=f"{size} ({why})")
        heads, noun = unit_count(self.unit, model)
        if self.rank_diagnostic > heads:
            raise LocosError(f"--rank-diagnostic {self.rank_diagnostic} is more than the {heads} {noun}s of "
                             f"{self.model}: give at most {heads} (every {noun} ablated alone)")
        above = [k for k in self.budgets if k > heads]
        if len(above) > 1 or (above and heads in self.budgets):
            raise LocosError(f"--budgets {','.join(map(str, above))} would all become {heads}, the model's {noun} "
                             f"count{' (already a budget)' if heads in self.budgets else ''}: keep at most one "
                             f"budget of {heads} or more")
        if above:  # one budget past the model's heads: every head ablated, said as a warning
            changes.update(budgets=tuple(sorted({min(k, heads) for k in self.budgets})), budgets_capped_at=heads)
        return replace(self, **changes) if changes else self

    def to_json(self) -> str:
        """The configuration as JSON (how a Ray actor receives it; `from_json` reads it back)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["ablation"] = asdict(self.ablation)
        data["specs"] = [spec.model_dump(mode="json") for spec in self.specs]
        return json.dumps(data, default=str)

    @classmethod
    def from_json(cls, text: str) -> ResolvedConfig:
        from locos_bench.interventions import AblationSpec
        from locos_bench.tasks import TaskSpec

        data = json.loads(text)
        data["ablation"] = AblationSpec(**data["ablation"])
        data["specs"] = tuple(TaskSpec.model_validate(spec) for spec in data["specs"])
        for name in ("output_dir", "data"):
            if data[name] is not None:
                data[name] = Path(data[name])
        for name in ("detectors", "tasks", "budgets", "lm_eval_tasks", "steer_alphas", "bottom_k"):
            data[name] = tuple(data[name])
        for name in ("variants", "fallbacks"):
            data[name] = tuple(tuple(pair) for pair in data[name])
        return cls(**data)


def unit_count(unit: str, model: Any) -> tuple[int, str]:
    """The loaded `model`'s count of `unit`s and the unit's noun (a dense model's experts: refused)."""
    if unit == "head":
        return model.geometry.n_total_heads, "head"
    if not model.info.get("experts"):  # before `expert_shape`, whose message names no flag
        raise LocosError(f"{model.name} has no experts (a dense model): --unit expert needs a mixture of experts")
    from locos_bench.interventions.experts import expert_shape

    return math.prod(expert_shape(model)), "expert"


_HEAD_ONLY = (("kv_sink", "--kv-sink"), ("kv_window", "--kv-window"), ("steer_alphas", "--steer-alphas"),  # an
              ("positionwise", "--positionwise"), ("sink", "--sink"),  # expert run refuses each of these
              ("lm_eval_tasks", "--lm-eval-tasks"))  # options that act on heads, by its flag


def _check_unit(cfg: RunConfig) -> None:
    """`unit` known, and an expert run without the options that only heads have."""
    from locos_bench.detectors.registry import UNITS

    if cfg.unit not in UNITS:
        raise unknown("--unit", cfg.unit, UNITS)
    if cfg.unit == "expert":
        for name, flag in _HEAD_ONLY:
            if (getattr(cfg, name) is not None) if name.startswith("kv_") else bool(getattr(cfg, name)):
                raise LocosError(f"{flag} acts on attention heads; an expert run (--unit expert) cannot take it")
        if cfg.sufficiency and (cfg.ablation or DEFAULT_ABLATION) != "mean":
            raise LocosError("--sufficiency on experts keeps a set alone with every other expert mean-ablated: "
                             "it needs --ablation mean")


def _check_alphas(alphas: Sequence[float]) -> list[float]:
    """Distinct amplifications in the given order; each a finite number > 0 and not 1."""
    out: list[float] = []
    for alpha in alphas:
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or alpha <= 0:
            raise LocosError(f"--steer-alphas must be numbers above 0 (got {alpha!r})")
        if alpha == 1:
            raise LocosError("--steer-alphas: 1 leaves the heads unchanged; give amplifications such as 1.5,2,4")
        if float(alpha) not in out:
            out.append(float(alpha))
    return out


KV_SINK, KV_WINDOW = 4, 64
"""A sufficiency run's streaming heads keep these first and last tokens unless `--kv-sink` /
`--kv-window` say otherwise (the flags default to None, so one given without `--sufficiency`
is seen and refused)."""


def _streaming(cfg: RunConfig) -> tuple[int, int]:
    """The streaming heads' sink and window: only a sufficiency run has streaming heads, so
    either given without it is refused rather than ignored."""
    if not cfg.sufficiency:
        for label, value in (("--kv-sink", cfg.kv_sink), ("--kv-window", cfg.kv_window)):
            if value is not None:
                raise LocosError(f"{label} sets the streaming heads of --sufficiency, which this run "
                                 "leaves out: add --sufficiency, or drop it")
    sink = KV_SINK if cfg.kv_sink is None else cfg.kv_sink
    window = KV_WINDOW if cfg.kv_window is None else cfg.kv_window
    check_streaming(sink, window)
    return sink, window


def check_output_dir(path: Path, flag: str = "--output-dir", what: str = "run directory") -> None:
    """Refuse an output folder (`flag` names it, `what` says what it is for) that is a file,
    lies under one, or cannot be written, before anything is written (`--dry-run` checks it
    too). Writing is tried, not read from the mode bits, which root ignores and a read-only
    mount or `/proc` never shows: a folder is made and removed again in the folder, or in its
    nearest existing parent."""
    import tempfile

    existing = path
    try:
        if path.exists() and not path.is_dir():
            raise LocosError(f"{flag} {path} is a file, not a {what}")
        # a relative path whose every parent is to be made is made in the working directory
        existing = next((p for p in (path, *path.parents) if p.exists()), Path.cwd())
        if not existing.is_dir():
            raise LocosError(f"{flag} {path}: {existing} is a file")
        Path(tempfile.mkdtemp(prefix=".locos-write-check-", dir=existing)).rmdir()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        where = "" if existing == path else f" in {existing}"
        raise LocosError(f"{flag} {path}: cannot write{where} ({why}); choose another folder") from None


def check_streaming(sink: int, window: int) -> None:
    """Refuse a sink or window the streaming mask cannot take (one line, before any load)."""
    for label, value, low in (("--kv-sink", sink, 0), ("--kv-window", window, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise LocosError(f"{label} must be an integer of at least {low} (got {value!r})")


def _resolve_bottom_k(requested: Sequence[str], detectors: Sequence[str], *, given: bool) -> list[str]:
    """The detectors whose bottom-k heads are ablated, in the run's order: `requested` names
    (comma-separated items), `all` (every deterministic detector) or `none`. A name the run
    lacks, or a stochastic detector (its bottom k are random heads again, as its top k are), is
    an error when the user `given` it, and left out when a preset names it."""
    from locos_bench.detectors import get_detector_class

    def stochastic(name: str) -> bool:
        try:
            return bool(getattr(get_detector_class(name), "stochastic", False))
        except Exception:  # a detector that fails to import is left to the run, which records why
            return False

    names = [n.strip() for item in requested for n in item.split(",") if n.strip()]
    if names == ["none"]:
        return []
    chosen = set()
    for name in names:
        if name == "all":
            chosen.update(d for d in detectors if not stochastic(d))
        elif name not in detectors or stochastic(name):
            if given:
                why = ("is stochastic: its bottom k are random heads, as its top k are" if name in detectors
                       else f"is not one of this run's detectors ({', '.join(detectors)})")
                raise LocosError(f"--bottom-k: {name!r} {why}")
        else:
            chosen.add(name)
    return [d for d in detectors if d in chosen]


def _resolve_detectors(requested: Sequence[str], preset: str, unit: str = "head") -> list[str]:
    """Detector names in order; `all` is every registered detector of `unit` whose `presets`
    admit `preset` (a detector that fails to import is left to the run, which records why). A
    detector of the other unit is refused by name."""
    from locos_bench.detectors import detector_names, get_detector_class

    def in_all(name: str) -> bool:
        try:
            presets = getattr(get_detector_class(name), "presets", None)
        except Exception:
            return True
        return presets is None or preset in presets

    available = detector_names(unit)
    other = "expert" if unit == "head" else "head"
    names: list[str] = []
    for item in requested:
        for name in item.split(","):
            name = name.strip()
            if not name:
                continue
            if name == "all":
                names.extend(n for n in available if in_all(n))
            elif name in detector_names(other):
                raise LocosError(f"detector {name!r} ranks {other}s, and this run ranks {unit}s "
                                 f"({unit} detectors: {', '.join(available)}; --unit {other} ranks {other}s)")
            elif name not in available:
                raise unknown("detector", name, [*available, "all"])
            else:
                names.append(name)
    if not names:
        raise LocosError("no detector given; use --detector all or a comma-separated list")
    names = list(dict.fromkeys(names))
    for name in names:
        _check_detector(name)
    return names


def _check_detector(name: str) -> None:
    """Detector `name` made with its default parameters, as the run makes it, before anything
    is written: one line when that fails or a parameter is not JSON (the manifest records
    them), rather than a traceback and a run directory holding only its lock."""
    from locos_bench.detectors import make_detector
    from locos_bench.detectors.base import check_params_serialisable

    try:
        detector = make_detector(name)
    except LocosError:
        raise
    except Exception as exc:  # a plugin's __init__ may raise anything
        why = (str(exc).strip().splitlines() or [""])[0]
        raise LocosError(f"detector {name!r} cannot be made with its default parameters "
                         f"({type(exc).__name__}: {why})") from None
    check_params_serialisable(detector)
