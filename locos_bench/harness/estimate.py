"""`locos-bench run --dry-run`: what a run would do and what it would cost, before any of it.

The plan comes from the run's own path: the configuration is resolved (`RunConfig.resolved`),
the model loaded and the tasks split exactly as `run_benchmark` does (`Run.prepare`: the
same one-line error for a configuration that cannot run), and the run directory checked as
a run would check it. No detector scores and nothing is written; the only model work is the
timing probes below.

Then each unit's work is counted from the tasks' real token counts: a scores unit's forward
passes from its detector's declared `cost` (`stated_passes`), a generation's prefills and
decoding steps, a rank unit's teacher-forced pass. Seconds on this machine are that work times
rates measured here on the loaded model (one-token rows: a call; the same rows at the first
retrieval task's prompt length: a further token; four times the rows: a shared decoding step;
one unablated generation of one batch: what a generated batch costs beyond those forwards),
in CPU seconds over the torch threads (an idle machine) and in wall seconds (the load of the
moment). A named GPU's seconds come from its peak matrix rate and memory bandwidth (a
roofline) with this host's per-call and per-batch work, its batch and peak memory from
`models.memory`'s planning. A detector that decodes its own answer (`locos`: "greedy
decoding" in its `cost`) has one such trial decoded and timed here.

Identical head sets are evaluated once, and which ones repeat is known only after detection.
Where a finished run of the same model is at hand (`leaderboard/*`, or beside the output
directory), its share of fresh evaluation and rank units is applied and named; the estimate
with every head set fresh is printed beside it as the upper bound.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from locos_bench.detectors import get_detector_class, make_detector
from locos_bench.errors import LocosError, unknown
from locos_bench.harness.driver import Run
from locos_bench.harness.progress import Progress, duration
from locos_bench.models.experts import expert_geometry, expert_parameters, touched_share
from locos_bench.run import BASELINE, RunConfig, RunPlan, UnitKind
from locos_bench.run.splits import ExternalControl

GPUS: dict[str, tuple[float, float, float]] = {
    # name: (memory GiB, dense bfloat16 TFLOP/s, memory TB/s), from the vendors' data sheets
    "h100": (80, 989, 3.35),
    "h200": (141, 989, 4.8),
    "a100": (80, 312, 2.04),
    "a100-40gb": (40, 312, 1.56),
    "l40s": (48, 362, 0.86),
}
"""The GPUs `--dry-run --gpu NAME` plans for."""
MFU = 0.4
"""Share of a GPU's peak matrix rate a prefill reaches (a usual figure for a fused forward)."""
LAUNCH = 150e-6
"""Seconds of kernel launches per layer of a GPU forward pass or decoding step (about 15
kernels of 10 us): what bounds a small model's passes from below."""
BACKWARD = 2
"""A backward pass costs about two forwards."""


def stated_passes(detector: str, n_heads_total: int, n_examples: int) -> float:
    """Forward-pass equivalents a detector's declared `cost` implies for `n_examples`
    calibration examples: the leading number per example, `ceil(n_heads_total / batch_size)`
    with its parameter, `steps x (forward + backward)` with its `steps`, a backward as
    `BACKWARD` forwards; a task-free detector's `n_sequences` passes in all."""
    cost = str(getattr(get_detector_class(detector), "cost", "1"))
    params = make_detector(detector).get_params()
    if "task-free" in cost:
        return float(params.get("n_sequences", 1))
    lead = re.match(r"\s*(\d+)", cost)
    per_example = float(lead.group(1)) if lead else 1.0
    if "n_heads_total" in cost:
        per_example += math.ceil(n_heads_total / int(params.get("batch_size", 1)))
    if "steps x (forward + backward)" in cost:
        per_example += int(params.get("steps", 1)) * (1 + BACKWARD)
    elif "backward" in cost:
        per_example += BACKWARD * float((re.search(r"(\d+) backward", cost) or [None, 1])[1])
    return per_example * n_examples


def decodes_its_answer(detector: str) -> bool:
    """Whether a detector's declared `cost` includes greedy decoding of each calibration example
    (`locos`: the authors' trial), which `dry_run` times on one example."""
    return "greedy decoding" in str(getattr(get_detector_class(detector), "cost", ""))


@dataclass(frozen=True)
class Reuse:
    """The share of units a finished run of the same model computed fresh (the rest repeated a
    head set already evaluated): the prior `--dry-run` applies before detection is known."""

    source: Path
    eval_fresh: int
    eval_total: int
    rank_fresh: int
    rank_total: int
    unit: str = "head"

    @property
    def eval_share(self) -> float:
        return self.eval_fresh / self.eval_total if self.eval_total else 1.0

    @property
    def rank_share(self) -> float:
        return self.rank_fresh / self.rank_total if self.rank_total else 1.0

    def describe(self) -> str:
        return (f"{self.unit} sets repeating as in {self.source}: {self.eval_fresh} of {self.eval_total} ablated evaluation "
                f"units and {self.rank_fresh} of {self.rank_total} rank units fresh")


def measured_reuse(model: str, roots: list[Path], unit: str = "head") -> Reuse | None:
    """The reuse of the finished run of `model` over `unit`s with the most ablated evaluation
    units among the run directories directly under `roots`; None when there is none (or none
    readable). A run over the other unit is no evidence: its sets are of other things."""
    from locos_bench.run import load_run

    best = None
    for root in roots:
        for path in sorted(root.glob("*/manifest.json")) if root.is_dir() else []:
            try:
                manifest, units = load_run(path.parent)
            except LocosError:
                continue  # unfinished or another layout: no evidence
            if manifest.model != model or manifest.unit != unit:
                continue
            fresh = {kind: [getattr(u, "reused", None) is not True and u.seconds > 0 for u in units
                            if u.key.kind == kind and u.key.detector != BASELINE]
                     for kind in (UnitKind.EVAL, UnitKind.RANK)}
            found = Reuse(path.parent, sum(fresh[UnitKind.EVAL]), len(fresh[UnitKind.EVAL]),
                          sum(fresh[UnitKind.RANK]), len(fresh[UnitKind.RANK]), unit)
            if found.eval_total and (best is None or found.eval_total > best.eval_total):
                best = found
    return best


@dataclass
class Work:
    """A run's work, counted: forward passes and the tokens they process, and decoding steps."""

    units: dict[str, int] = field(default_factory=dict)
    passes: dict[str, float] = field(default_factory=dict)
    """Forward calls by phase (a batch of sequences in one call counts once)."""
    tokens: dict[str, float] = field(default_factory=dict)
    """Prefill tokens by phase (a pass of T tokens counts T)."""
    steps: dict[str, float] = field(default_factory=dict)
    """Decoding steps by phase (one step: one token for every row of a batch)."""
    generations: dict[str, float] = field(default_factory=dict)
    """Batches generated by phase (head sets decoded together count once): each carries the
    work around its forwards (gold pass, cache copies, stopping, metrics)."""
    trials: dict[str, float] = field(default_factory=dict)
    """One-example greedy decodes by phase (`decodes_its_answer`), priced as the timed one."""
    trial_steps: int = 0
    """Steps the timed trial took (its prefill aside); 0 when no detector decodes."""
    trial_tokens: float = 0.0
    """Mean prompt tokens of the decoded trials (what a GPU's estimate prefills)."""
    reuse: Reuse | None = None
    """The finished run whose shares of fresh units were applied (`measured_reuse`)."""

    def add(self, phase: str, passes: float, tokens: float, steps: float = 0.0, generations: float = 0.0) -> None:
        for table, value in ((self.passes, passes), (self.tokens, tokens), (self.steps, steps),
                             (self.generations, generations)):
            table[phase] = table.get(phase, 0.0) + value


@dataclass
class Estimate:
    """What `--dry-run` prints: the plan's units, the work, seconds and peak memory."""

    work: Work
    seconds: dict[str, float]
    peak_gib: float
    rates: str
    where: str
    batch_size: int
    host_call: float = 0.0
    """This machine's seconds for a one-token call (Python, hooks: what a GPU's host pays too)."""
    host_generation: float = 0.0
    """This machine's seconds a generated batch costs beyond its forwards (host work too)."""
    upper_seconds: float | None = None
    """The total with every head set evaluated fresh; None when no reuse was applied."""

    @property
    def total_seconds(self) -> float:
        return sum(self.seconds.values())


def dry_run(cfg: RunConfig, *, gpu: str | None = None) -> tuple[RunPlan, Work, list[Estimate]]:
    """The plan and its cost on this machine (and on `gpu`), computed as the run would start."""
    from locos_bench.models import load_model

    if gpu is not None and gpu not in GPUS:
        raise unknown("GPU", gpu, GPUS)
    config = cfg.resolved()
    model = load_model(config.model, device=config.device, dtype=config.dtype, context_tokens=config.context_tokens)
    run = Run(config, model, Progress(quiet=True))
    tasks = run.prepare()
    run.previous()  # the run directory's check, read only
    reuse = measured_reuse(config.model, [Path("leaderboard"), Path(config.output_dir).parent], config.unit)
    work = count_work(run.plan, run.config, model, tasks, reuse=reuse)
    upper = count_work(run.plan, run.config, model, tasks) if reuse is not None else None
    trial = _timed_trial(run, tasks) if work.trials else None
    for w in (work, upper):
        if w is not None:
            w.trial_steps = trial[0] if trial else 0
    estimates = [local_estimate(work, run, tasks, trial=trial[1:] if trial else (0.0, 0.0), upper=upper)]
    if gpu is not None:
        estimates.append(gpu_estimate(work, run, gpu, host_call=estimates[0].host_call,
                                      host_generation=estimates[0].host_generation, upper=upper))
    return run.plan, work, estimates


def count_work(plan: RunPlan, config: Any, model: Any, tasks: dict[str, Any], *, reuse: Reuse | None = None) -> Work:
    """Each unit's forward calls, prefill tokens and decoding steps, from the tasks' tokenized
    splits: a detector's passes run one example at a time, evaluations batch `batch_size`
    examples (each head set's prefill a call of its own, the decoding shared by up to
    `eval_head_sets` sets). With `reuse`, ablated evaluation and rank units count at its shares
    of fresh units; without, every head set is fresh (the upper bound)."""
    eval_share = reuse.eval_share if reuse is not None else 1.0
    rank_share = reuse.rank_share if reuse is not None else 1.0
    work = Work(reuse=reuse)
    n_heads = model.geometry.n_total_heads
    batch = config.batch_size
    for key in plan.units():
        work.units[str(key.kind)] = work.units.get(str(key.kind), 0) + 1
    for task in plan.retrieval_tasks:
        data = tasks[task]
        for key in plan.scores_keys(task):
            calib = data.calibration_draw(key.draw)
            lengths = [t.n_tokens for t in _tokenized(model, calib)]
            passes = stated_passes(key.detector, n_heads, len(calib))
            work.add("detect", passes, passes * _mean(lengths))
            if decodes_its_answer(key.detector):
                done = work.trials.get("detect", 0.0)
                work.trials["detect"] = done + len(calib)
                work.trial_tokens = (work.trial_tokens * done + sum(lengths)) / (done + len(calib))
    for name, data in tasks.items():
        if isinstance(data, ExternalControl):
            continue  # an lm-eval control's work is its harness's: not counted
        evaluation = data.tokenized(model, "evaluation")
        prompts = sum(t.prompt_len for t in evaluation)
        answers = [len(t.answer_ids) for t in evaluation]
        steps = min(data.spec.max_new_tokens, max(answers, default=1) + 1)  # a row stops at its newline
        n_batches = math.ceil(len(evaluation) / batch)
        if config.ablation.needs_reference and plan.task(name).kind != "variant":
            ref = [t.n_tokens for t in data.tokenized(model, "reference")]
            work.add("reference", len(ref), sum(ref))
        keys = list(plan.task_units(name))
        for kind in (UnitKind.EVAL, UnitKind.BOTTOM, UnitKind.STEER):
            sets = sum(1 for k in keys if k.kind == kind and k.detector == BASELINE)
            sets += sum(1 for k in keys if k.kind == kind and k.detector != BASELINE) * (
                eval_share if kind is UnitKind.EVAL else 1.0)
            shared = math.ceil(sets / config.eval_head_sets)  # sets decoded together
            work.add(kind.phase, sets * n_batches, sets * prompts, shared * n_batches * steps, shared * n_batches)
        ranks = sum(1 for k in keys if k.kind == UnitKind.RANK) * rank_share
        work.add(UnitKind.RANK.phase, ranks * n_batches, ranks * sum(t.n_tokens for t in evaluation))
        grid = sum(1 for k in keys if k.kind == UnitKind.GRID) * eval_share  # prefilled in the chain, no decoding
        work.add(UnitKind.GRID.phase, grid * n_batches, grid * prompts)
        suff = sum(1 for k in keys if k.kind == UnitKind.SUFF)
        work.add(UnitKind.SUFF.phase, suff * n_batches, suff * prompts, suff * n_batches * steps, suff * n_batches)
    return work


def local_estimate(work: Work, run: Run, tasks: dict[str, Any], *, trial: tuple[float, float] = (0.0, 0.0),
                   upper: Work | None = None) -> Estimate:
    """Seconds and peak memory on this machine, from a tiny timed forward of the loaded model:
    a batch of one-token rows (a call's fixed cost), the same rows at the first retrieval
    task's prompt length (the cost of each further token) and `eval_head_sets` times the rows
    (a shared decoding step); a decoded trial at `trial` (its CPU and wall seconds, timed).
    `upper`: the same work with every head set fresh, priced alike (`Estimate.upper_seconds`)."""
    import torch

    model, batch = run.model, run.config.batch_size
    probe = _first_retrieval(tasks)
    prompts = [t.input_ids[: t.prompt_len] for t in probe.tokenized(model, "evaluation")[:batch]]
    width = min(len(p) for p in prompts)
    ids = torch.tensor([p[-width:] for p in prompts], device=model.device)
    rows = ids[:, -1:].repeat(run.config.eval_head_sets, 1)  # shared decoding: every set's rows at once
    threads = torch.get_num_threads()
    rates = {}
    for clock in ("cpu", "wall"):  # idle: CPU seconds over the threads; now: wall under today's load
        share = threads if clock == "cpu" else 1
        call = _best(lambda: model.bridge(ids[:, -1:]), clock) / share
        whole = _best(lambda: model.bridge(ids, logits_to_keep=1), clock) / share
        step = _best(lambda: model.bridge(rows), clock) / share
        rates[clock] = (call, max(whole - call, 0.0) / (ids.numel() - len(ids) or 1), step)
    # One real generation of one batch (the first retrieval task's, unablated): what a
    # generated batch costs beyond the forwards the rates above price.
    from locos_bench.evaluation import evaluate_task

    spec, first = probe.spec, probe.evaluation[:batch]
    n_steps = min(spec.max_new_tokens, max(len(t.answer_ids) for t in probe.tokenized(model, "evaluation")) + 1)
    extra = {}
    for clock in ("cpu", "wall"):
        share = threads if clock == "cpu" else 1
        generated = _best(lambda: evaluate_task(model, spec, first, batch_size=batch), clock, repeats=1) / share
        call, token, step = rates[clock]
        extra[clock] = max(generated - call - token * (ids.numel() - len(ids)) - step * n_steps, 0.0)
    per_call, per_token, per_step = rates["cpu"]
    per_trial = trial[0] / threads

    def price(w: Work) -> dict[str, float]:
        return _seconds(w, per_token, per_step, per_pass=per_call, per_generation=extra["cpu"], per_trial=per_trial)

    seconds = price(work)
    now = sum(_seconds(work, rates["wall"][1], rates["wall"][2], per_pass=rates["wall"][0],
                       per_generation=extra["wall"], per_trial=trial[1]).values())
    seconds["load_model"] = model.load_seconds
    import resource

    resident = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # bytes on Linux
    peak = resident + _activation_bytes(run, tasks)
    return Estimate(work, seconds, peak / 2 ** 30, batch_size=batch, where=f"this machine when idle ({_cpu()}, "
                    f"{torch.get_num_threads()} threads, {run.config.device}, {model.dtype})",
                    host_call=per_call, host_generation=extra["cpu"],
                    upper_seconds=sum(price(upper).values()) + model.load_seconds if upper is not None else None,
                    rates=f"timed forward of {len(prompts)} x {width} tokens, CPU seconds / {threads} threads: "
                          f"{per_call * 1e3:.1f} ms a call, {per_token * 1e3:.3f} ms a further token, "
                          f"{per_step * 1e3:.1f} ms a decoding step of {len(rows)} rows, {extra['cpu'] * 1e3:.0f} ms "
                          f"more a generated batch (one timed)"
                          + (f", {per_trial:.2f} s a decoded trial ({work.trial_steps} steps, one timed)" if per_trial else "")
                          + "; at this moment's load "
                          f"(wall clock) ~{duration(now + model.load_seconds)}")


def gpu_estimate(work: Work, run: Run, gpu: str, *, host_call: float = 0.0, host_generation: float = 0.0,
                 upper: Work | None = None) -> Estimate:
    """Seconds, batch and peak memory on a named GPU in bfloat16 (`models.memory`'s planning);
    a call costs at least `host_call` (the Python and hook work of a one-token call, measured
    on this machine's CPU, which a GPU's host does too) and its kernel launches."""
    from locos_bench.models import memory

    memory_gib, tflops, bandwidth = GPUS[gpu]
    model = run.model
    geo = model.geometry
    hf = model.bridge.original_model
    params = sum(p.numel() for p in hf.parameters())
    weights = params * memory.BYTES["bfloat16"]
    tokens = run.config.context_tokens
    free = memory_gib * memory.GIB - weights
    if free <= 0:
        raise LocosError(f"{run.config.model} needs {weights / memory.GIB:.1f} GiB of weights in bfloat16: more than "
                         f"the {memory_gib} GiB of a {gpu}")
    batch = memory.batch_size_for(geo, tokens, int(free), "bfloat16")
    moe = expert_geometry(hf)
    # A mixture of experts holds every expert but computes, per token, with its top k only; a
    # decoding step reads the experts its batch's rows route to.
    in_experts = expert_parameters(hf, moe) if moe else 0
    active = params - in_experts + (in_experts * moe.top_k // moe.n_experts if moe else 0)
    read = params - in_experts + (in_experts * touched_share(moe, batch) if moe else 0)
    flops_per_token = 2 * active + 4 * geo.n_layers * geo.n_heads * geo.d_head * tokens
    per_token = flops_per_token / (tflops * 1e12 * MFU)  # prefill is compute-bound
    overhead = max(LAUNCH * geo.n_layers, host_call)
    per_step = read * memory.BYTES["bfloat16"] / (bandwidth * 1e12) + overhead  # a step reads the weights it uses once
    per_trial = overhead + work.trial_tokens * per_token + work.trial_steps * per_step

    def price(w: Work) -> dict[str, float]:
        return _seconds(w, per_token, per_step, batch_ratio=run.config.batch_size / batch, per_pass=overhead,
                        per_generation=host_generation, per_trial=per_trial)

    seconds = price(work)
    peak = weights + batch * memory.sequence_bytes(geo, tokens, "bfloat16")
    return Estimate(work, seconds, peak / memory.GIB, batch_size=batch,
                    upper_seconds=sum(price(upper).values()) if upper is not None else None,
                    where=f"{gpu} ({memory_gib:g} GiB, bfloat16, batch {batch} from free memory)",
                    rates=f"roofline: {tflops:g} TFLOP/s at {MFU:.0%} for prefill, {bandwidth:g} TB/s reading "
                          f"the weights per decoding step, {overhead * 1e3:.1f} ms a call (host or launches)"
                          + (f"; {moe.top_k} of {moe.n_experts} experts computed per token" if moe else ""))


def _seconds(work: Work, per_token: float, per_step: float, batch_ratio: float = 1.0,
             per_pass: float = 0.0, per_generation: float = 0.0, per_trial: float = 0.0) -> dict[str, float]:
    """Seconds by phase: prefill tokens at `per_token` (plus `per_pass` a call), decoding
    steps at `per_step`, each generated batch `per_generation` more, each decoded trial
    `per_trial`; a larger batch (`batch_ratio` < 1) takes fewer calls, steps and batches,
    except where a call holds one example (detection, the reference means)."""
    phases = set(work.tokens) | set(work.steps) | set(work.trials)
    ratio = {p: 1.0 if p in ("detect", "reference") else batch_ratio for p in phases}  # those run one example a call
    return {p: work.tokens.get(p, 0.0) * per_token + work.trials.get(p, 0.0) * per_trial
            + (work.passes.get(p, 0.0) * per_pass + work.steps.get(p, 0.0) * per_step
               + work.generations.get(p, 0.0) * per_generation) * ratio[p] for p in sorted(phases)}


def _first_retrieval(tasks: dict[str, Any]) -> Any:
    """The run's first retrieval task's data: what the timing probes measure on."""
    return next(d for d in tasks.values() if not isinstance(d, ExternalControl) and d.spec.kind == "retrieval")


def _timed_trial(run: Run, tasks: dict[str, Any]) -> tuple[int, float, float]:
    """One decoded trial as a detector that decodes its answer runs it (`detectors._trials`), on
    the first retrieval task's first calibration example: its steps, CPU seconds and wall seconds."""
    from locos_bench.detectors._trials import MAX_STEPS, stop_ids
    from locos_bench.evaluation.generation import greedy_token_ids

    model = run.model
    data = _first_retrieval(tasks)
    t = _tokenized(model, data.calibration_draw(0)[:1])[0]
    stops = stop_ids(model)
    start, wall = time.process_time(), time.perf_counter()
    generated = greedy_token_ids(model, t.input_ids[:t.prompt_len], max_new_tokens=MAX_STEPS, stop_before=stops)
    # the step that met a stop token counts too
    return len(generated) + 1, time.process_time() - start, time.perf_counter() - wall


def _activation_bytes(run: Run, tasks: dict[str, Any]) -> int:
    """Beyond what is resident once the model is loaded: the largest shared decoding batch's
    activations, every retrieval task's kept clean prefills (capped as the worker caps them:
    2 GiB a task on a CPU), and the largest batched detection pass (`_detect_bytes`)."""
    from locos_bench.models import memory

    geo, config = run.model.geometry, run.config
    dtype = run.model.dtype if run.model.dtype in memory.BYTES else "float32"
    rows = config.batch_size * config.eval_head_sets
    tokens = config.context_tokens  # evaluation keeps the logits of the last position only
    decoding = rows * (memory.sequence_bytes(geo, tokens, dtype) - tokens * geo.d_vocab * 4 + geo.d_vocab * 4)
    kept = 0
    for data in tasks.values():
        if isinstance(data, ExternalControl):
            continue
        tokens = sum(t.prompt_len for t in data.tokenized(run.model, "evaluation"))
        per_token = geo.n_layers * (geo.d_model + 2 * geo.n_kv_heads * geo.d_head) * memory.BYTES[dtype]
        kept += min(2 * 1024 ** 3, tokens * per_token)
    return decoding + kept + _detect_bytes(run, tasks, memory.BYTES[dtype])


def _detect_bytes(run: Run, tasks: dict[str, Any], width: int) -> int:
    """The largest working set of a detector that patches heads in batches (its cost counts
    `n_heads_total / batch_size` passes): `batch_size` rows, each holding the prompt's KV cache
    and the answer positions' logits and log-probs. Measured on gemma3 (peak RSS of `score` on
    kv-retrieval, 2026-12-04): 0.62 GiB above `locos`'s for `activation-patching`, and a full
    run's peak exceeded an evaluation-only run's by as much: the allocator keeps what detection
    freed, so it is added to evaluation's, not compared with it."""
    geo, plan = run.model.geometry, run.plan
    kv_per_token = geo.n_layers * 2 * geo.n_kv_heads * geo.d_head * width
    largest = 0
    for detector in plan.detectors:
        cost = str(getattr(get_detector_class(detector.name), "cost", ""))
        rows = make_detector(detector.name).get_params().get("batch_size")
        if "n_heads_total" not in cost or not rows:
            continue
        for task in plan.retrieval_tasks:
            calib = _tokenized(run.model, tasks[task].calibration_draw(0))
            prompt = max((t.prompt_len for t in calib), default=0)
            answer = max((len(t.answer_ids) for t in calib), default=0)
            largest = max(largest, int(rows) * (prompt * kv_per_token + 2 * answer * geo.d_vocab * 4))
    return largest


def _tokenized(model: Any, examples: list[Any]) -> list[Any]:
    from locos_bench.tasks.tokenize import tokenize_example

    return [tokenize_example(e, model.tokenizer) for e in examples]


def _best(fn: Any, clock: str = "wall", repeats: int = 3) -> float:
    """The least of `repeats` timings of `fn()`: wall seconds, or this process's CPU seconds."""
    import torch

    now = time.process_time if clock == "cpu" else time.perf_counter
    times = []
    with torch.inference_mode():
        for _ in range(repeats):
            start = now()
            fn()
            times.append(now() - start)
    return min(times)


def _mean(values: list[int]) -> float:
    return sum(values) / len(values) if values else 0.0


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    import platform

    return platform.processor() or "unknown CPU"
