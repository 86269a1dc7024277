"""A run's manifest (`manifest.json`): the schema, and the manifest of a run starting now or
resumed.

`build_manifest` makes it from the resolved configuration (`run.config.ResolvedConfig`), the
loaded model and the run's tasks. It imports the detectors and models it reads inside, so the
schema loads without torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from locos_bench.names import references
from locos_bench.run.plan import ALL_BUDGETS, EACH_RETRIEVAL, FIRST_RETRIEVAL
from locos_bench.run.provenance import Provenance, provenance

if TYPE_CHECKING:
    from locos_bench.run.config import ResolvedConfig

SCHEMA_VERSION = 1


class TaskEntry(BaseModel):
    """One task of a run, with the exact examples used per split."""

    model_config = ConfigDict(extra="forbid")

    name: str
    version: int
    kind: Literal["retrieval", "control", "variant"]
    """`variant`: a harder variant of a retrieval task (`variant_of`), evaluated only unablated
    and steered, with that task's heads (runs with `steer_alphas`)."""
    metrics: list[str]
    """Task metrics; the first is the headline metric."""
    splits: dict[str, list[int]]
    """Example indices of the `calibration`, `reference` and `evaluation` splits (disjoint), and
    under `calibration_draws` R > 1 of the further calibration subsets `calibration.1`, ..."""
    data_hash: str
    """sha256 over every used example's prompt and answers: detects changed generators."""
    chance: float | None = None
    variant_of: str | None = None
    skipped_rows: int = 0
    """Bad rows of a user's data file set aside under `--skip-bad-rows` (0 without it: a bad
    row fails the run; 0 in manifests written before it was recorded)."""
    items: list[str] | None = None
    """The evaluation split's items, one per example in its order (`metadata["item"]`: the fact
    or needle an example asks about); examples of one item are resampled and sign-flipped
    together. None in manifests written before issue #50 (the report reads them from the task's
    data) and for an external control."""


class DetectorEntry(BaseModel):
    """A detector as configured for the run."""

    model_config = ConfigDict(extra="forbid")

    name: str
    params: dict[str, Any]
    source: str
    """`built-in` or `dist==version` of the plugin that provided it."""
    cost: str
    """Forward passes per calibration example, as the detector declares it."""
    stochastic: bool = False
    adapts: str = ""
    """What the detector takes from its reference and where it departs (`Detector.adapts`);
    empty in manifests written before it was recorded."""


class Streaming(BaseModel):
    """The streaming heads of a sufficiency run: each attends to its row's first `sink` real
    tokens and the last `window` tokens (`interventions.streaming`)."""

    model_config = ConfigDict(extra="forbid")

    sink: int
    window: int
    """An expert run's sufficiency streams nothing (every other expert is mean-ablated): 0 and 0."""


class RandomStrata(BaseModel):
    """`random`'s draws stratified on each retrieval task's strongest single head
    (`run.plan.Strata`): written when a run starts, where the shipped oracle's scan fits every
    retrieval task; kept as recorded when the run resumes (its draws were taken under it)."""

    model_config = ConfigDict(extra="forbid")

    detector: str = "random"
    heads: dict[str, list[int]]
    """Retrieval task -> [layer, head]: the head of the largest mean gold drop ablated alone."""
    first: int
    """Draws `0 .. first - 1` rank the head first; the others rank it last."""


class Family(BaseModel):
    """The pre-specified comparisons behind a run's verdicts, fixed when the run is made and
    never by the page that shows it: for each figure, each (detector, reference) pair as the
    difference detector - reference, with simultaneous intervals over the pairs (max-T).
    Rank sets compare every pair of the run's detectors on the ablation figures. Definitions:
    `docs/methodology.md` (Separability)."""

    model_config = ConfigDict(extra="forbid")

    figures: list[str]
    """`ablation:headline` and `ablation:gold_logprob` (mean drop-area over retrieval tasks);
    under `sufficiency` also `sufficiency:headline`, `sufficiency:gold_logprob` (kept minus
    unablated), under `steer_alphas` `steering:headline`, `steering:gold_logprob` (steered minus
    unablated), under `bottom_k` `bottom-k:headline`, `bottom-k:gold_logprob` (drop-areas of
    each named detector's bottom-k heads: its pairs are not `pairs` but, per such detector,
    bottom-k minus random and top-k minus bottom-k, `report.statistics.bottom_k`); each is a family of its
    own."""
    pairs: list[tuple[str, str]]
    """(detector, reference): every other detector against each reference, and the references'
    own pair once."""
    level: float = 0.95


def default_family(detectors: Sequence[str], *, sufficiency: bool = False, steering: bool = False,
                   bottom_k: Sequence[str] = ()) -> Family:
    """The family a run of `detectors` pre-specifies (`Family`): the same for a run directory
    whose manifest predates the field, from its own configuration."""
    refs = references(detectors)
    pairs = [(d, r) for d in detectors if d not in refs for r in refs]
    pairs += [(a, b) for i, a in enumerate(refs) for b in refs[i + 1:]]
    figures = [f"{part}:{metric}" for part, on in (("ablation", True), ("sufficiency", sufficiency),
                                                    ("steering", steering), ("bottom-k", bool(bottom_k))) if on
               for metric in ("headline", "gold_logprob")]
    return Family(figures=figures, pairs=pairs)


class Manifest(BaseModel):
    """Configuration and provenance of a run directory."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    model: str
    """Model alias or id."""
    model_info: dict[str, Any]
    """Head geometry and load facts (`LoadedModel.describe()`)."""
    tasks: list[TaskEntry]
    detectors: list[DetectorEntry]
    budgets: list[int]
    """Numbers of ablated heads k, identical for every detector."""
    ablation: str
    """`mean`, `zero` or `scale:ALPHA` on each head's output `z`; `mean-q` or `zero-q` on its
    query (`interventions.query`)."""
    positionwise: bool = False
    """Mean ablation per position (True) or position-agnostic (False, default)."""
    sink: str = "mean"
    """What mean ablation wrote at a BOS sink (position 0): `keep` (left untouched) or `mean`
    (replaced like every position; manifests written before the option, which used it)."""
    random_draws: int
    random_seed: int | None = None
    """The `random` detector's draw d used Python's `random.Random(random_seed + d)`, as the
    LOCOS authors draw random heads; None: its draws came from `seed`."""
    calibration_draws: int = 1
    """Disjoint calibration subsets (`calibration`, `calibration.1`, ... in `splits`): each
    deterministic detector's draw d scores heads on subset d; a stochastic one's on d mod R."""
    seed: int
    tie_seed: int | None = None
    """Seed of the permutation that breaks exact score ties in every ranking of the run
    (`names.rank_heads`): the run's `seed`. None in manifests written before it: their
    rankings broke ties by (layer, head), and the analysis keeps that rule for them."""
    rank_diagnostic: int
    """How many of each detector's top heads are also ablated one at a time."""
    batch_size: int
    provenance: Provenance
    timings: dict[str, float] = Field(default_factory=dict)
    """Wall seconds per phase, filled as the run goes (`detect`, `evaluate`, ...)."""
    fallbacks: dict[str, str] = Field(default_factory=dict)
    """Synthetic tasks run in place of their real benchmark (`--preset paper`), with why the
    real one was not used (its data absent, the hub unreachable)."""
    control_heads: str = FIRST_RETRIEVAL
    """Whose heads control tasks ablate: `each-retrieval` (every retrieval task's, paired
    specificity) or `first-retrieval` (runs recorded before it; not part of `config_key`, so
    resuming such a run upgrades it, see `locos_bench.run.plan`)."""
    control_budgets: str = ALL_BUDGETS
    """Budgets control tasks are evaluated at: `all` (every budget; manifests written before
    the field) or `largest` (the largest only, where specificity is then read). Not part of
    `config_key`: resuming a run that holds every budget keeps `all` (`run.manifest.resumed`)."""

    sufficiency: Streaming | None = None
    """Set when each retrieval task is also evaluated with only each detector's top-k heads
    full and every other head streaming (`SufficiencyUnit`); None: no sufficiency units."""

    steer_alphas: list[float] = Field(default_factory=list)
    """Amplifications of the steering units (`SteeringUnit`); empty: none."""

    steer_calibration: bool = False
    """Whether each retrieval task is also steered on each detector draw's calibration examples,
    where each detector's alpha is chosen (`RunPlan.steer_calibration_keys`); False in manifests
    written before. Not part of `config_key`: resuming such a run adds those units."""

    bottom_k: list[str] = Field(default_factory=list)
    """Detectors whose bottom-k heads each retrieval task also ablates (`BottomUnit`); empty:
    none. Not part of `config_key`: a resumed run adds the bottom-k units it lacks and keeps
    those it holds (`run.manifest.resumed`)."""

    random_strata: RandomStrata | None = None
    """How `random`'s draws are stratified (`RandomStrata`); None: plain uniform draws (every
    run without a fitting oracle, and runs recorded before it)."""

    oracle_grid: list[PositiveInt] = Field(default_factory=list)
    """Numbers of heads k, none a budget, at which each retrieval task also ablates each
    deterministic detector's top-k heads for the gold log-prob alone (`GridUnit`): every k the
    shipped necessity oracle searched, where it fits the run (`harness.oracle_scan.oracle_grid`),
    so the oracle section reads shares at every k. Empty: none (no fitting oracle, and runs
    recorded before it). Not part of `config_key`: resuming such a run adds the units."""

    unit: str = "head"
    """What the detectors ranked and the budgets count: `head` (every run recorded before the
    field), or `expert`, `(layer, expert)` of a mixture of experts, where `heads` in the records
    hold experts and `ablation` is `mask` or `mean` (`interventions.experts`)."""

    family: Family | None = None
    """The comparisons behind the run's verdicts, written by the run. None in manifests
    written before it: `verdict_family` derives the same from the run's configuration."""

    def verdict_family(self) -> Family:
        """The run's pre-specified family: as written, else derived from its detectors and
        options (`default_family`), never from what a page shows."""
        if self.family is not None:
            return self.family
        return default_family([d.name for d in self.detectors], sufficiency=self.sufficiency is not None,
                              steering=bool(self.steer_alphas), bottom_k=self.bottom_k)

    def config_key(self) -> dict[str, Any]:
        """The part that must match for a rerun to resume into the same directory."""
        return self.model_dump(include={"model", "tasks", "detectors", "budgets", "ablation",
                                        "positionwise", "sink", "random_draws", "random_seed", "calibration_draws",
                                        "seed", "rank_diagnostic", "sufficiency", "steer_alphas", "unit"})


def build_manifest(config: ResolvedConfig, model: Any, tasks: Mapping[str, Any]) -> Manifest:
    """The manifest of a run starting now.

    Args:
        config: The run's configuration, bound to `model` (`ResolvedConfig.for_model`).
        model: The loaded model (its facts, and a planted model's answer key, go to `model_info`).
        tasks: The run's tasks by name (`run.splits.RunTask`: each gives its `entry`).
    """
    from locos_bench.models import describe_with_answer_key

    model_info = describe_with_answer_key(model, str(config.ablation), config.unit)
    if config.batch_size_chosen is not None:
        model_info["batch_size_chosen"] = config.batch_size_chosen
    return Manifest(
        model=config.model, model_info=model_info, tasks=[t.entry for t in tasks.values()],
        detectors=[detector_entry(name) for name in config.detectors], budgets=list(config.budgets),
        ablation=str(config.ablation), positionwise=config.ablation.positionwise, sink=config.ablation.sink,
        random_draws=config.random_draws, random_seed=config.random_seed, calibration_draws=config.calibration_draws, seed=config.seed,
        tie_seed=config.seed, rank_diagnostic=config.rank_diagnostic, batch_size=config.batch_size,
        provenance=provenance(config.device), fallbacks=dict(config.fallbacks), control_heads=EACH_RETRIEVAL,
        control_budgets=config.control_budgets,
        steer_alphas=list(config.steer_alphas), steer_calibration=bool(config.steer_alphas),
        bottom_k=list(config.bottom_k), unit=config.unit,
        sufficiency=(None if not config.sufficiency else Streaming(sink=0, window=0) if config.unit == "expert"
                     else Streaming(sink=config.kv_sink, window=config.kv_window)),
        family=default_family(list(config.detectors), sufficiency=bool(config.sufficiency),
                              steering=bool(config.steer_alphas), bottom_k=list(config.bottom_k)),
    )


def detector_entry(name: str) -> DetectorEntry:
    """A detector as the manifest records it: its parameters, where it comes from, its cost."""
    from locos_bench.detectors import detector_source, get_detector_class, make_detector

    cls = get_detector_class(name)
    return DetectorEntry(name=name, params=make_detector(name).get_params(), source=detector_source(name),
                         cost=str(getattr(cls, "cost", "?")), stochastic=bool(getattr(cls, "stochastic", False)),
                         adapts=str(getattr(cls, "adapts", "") or ""))


def resumed(manifest: Manifest, old: Manifest) -> Manifest:
    """The manifest of a resumed run: this session's, with the provenance (the run began then),
    tie rule (None: ties broken by index) and timings the run directory already holds,
    bottom-k for the detectors of either (units already computed are kept), and controls at
    every budget if the directory holds them so (a superset of the largest budget), and the
    random draws' strata it was recorded with (its draws were taken under them), and the oracle
    grid of either (units already computed are kept)."""
    bottom = [d.name for d in manifest.detectors if d.name in {*manifest.bottom_k, *old.bottom_k}]
    family = default_family([d.name for d in manifest.detectors], sufficiency=manifest.sufficiency is not None,
                            steering=bool(manifest.steer_alphas), bottom_k=bottom)
    control_budgets = ALL_BUDGETS if old.control_budgets == ALL_BUDGETS else manifest.control_budgets
    return manifest.model_copy(update=dict(provenance=old.provenance, tie_seed=old.tie_seed,
                                           timings=dict(old.timings), bottom_k=bottom, family=family,
                                           control_budgets=control_budgets, random_strata=old.random_strata,
                                           oracle_grid=sorted({*old.oracle_grid, *manifest.oracle_grid}
                                                              - set(manifest.budgets))))
