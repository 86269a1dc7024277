"""`locos-bench run --dry-run`: what a run would do and what it would cost, before any of it.

The plan comes from the run's own path: the configuration is resolved (`RunConfig.resolved`),
the model loaded and the tasks split exactly as `run_benchmark` does (`Run.prepare`: the
same one-line error for a configuration that cannot run), and the run directory checked as
a run would check it. Nothing is scored, evaluated or written.

Then each unit's work is counted from the tasks' real token counts: a scores unit's forward
passes from its detector's declared `cost` (`stated_passes`), a generation's prefills and
decoding steps, a rank unit's teacher-forced pass. Seconds on this machine are that work
times two rates measured here by timing a tiny forward of the loaded model (a batch of the
first retrieval task's evaluation prompts, and a batch of one-token rows for a decoding
step); a named GPU's seconds come from its peak matrix rate and memory bandwidth (a
roofline), its batch and peak memory from `models.memory`'s planning. Identical head sets
that the run evaluates once (found only after detection) are counted in full here, so the
estimate is an upper bound on evaluation work.
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
from locos_bench.harness.progress import Progress
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

    def add(self, phase: str, passes: float, tokens: float, steps: float = 0.0) -> None:
        for table, value in ((self.passes, passes), (self.tokens, tokens), (self.steps, steps)):
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
    work = count_work(run.plan, run.config, model, tasks)
    estimates = [local_estimate(work, run, tasks)]
    if gpu is not None:
        estimates.append(gpu_estimate(work, run, gpu, host_call=estimates[0].host_call))
    return run.plan, work, estimates


def count_work(plan: RunPlan, config: Any, model: Any, tasks: dict[str, Any]) -> Work:
    """Each unit's forward calls, prefill tokens and decoding steps, from the tasks' tokenized
    splits: a detector's passes run one example at a time, evaluations batch `batch_size`
    examples (each head set's prefill a call of its own, the decoding shared by up to
    `eval_head_sets` sets)."""
    work = Work()
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
        for kind in (UnitKind.EVAL, UnitKind.STEER):
            sets = sum(1 for k in keys if k.kind == kind)
            shared = math.ceil(sets / config.eval_head_sets)  # sets decoded together
            work.add(kind.phase, sets * n_batches, sets * prompts, shared * n_batches * steps)
        ranks = sum(1 for k in keys if k.kind == UnitKind.RANK)
        work.add(UnitKind.RANK.phase, ranks * n_batches, ranks * sum(t.n_tokens for t in evaluation))
        suff = sum(1 for k in keys if k.kind == UnitKind.SUFF)
        work.add(UnitKind.SUFF.phase, suff * n_batches, suff * prompts, suff * n_batches * steps)
    return work


def local_estimate(work: Work, run: Run, tasks: dict[str, Any]) -> Estimate:
    """Seconds and peak memory on this machine, from a tiny timed forward of the loaded model:
    a batch of one-token rows (a call's fixed cost), the same rows at the first retrieval
    task's prompt length (the cost of each further token) and `eval_head_sets` times the rows
    (a shared decoding step)."""
    import torch

    model, batch = run.model, run.config.batch_size
    probe = next(d for d in tasks.values() if not isinstance(d, ExternalControl) and d.spec.kind == "retrieval")
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
    per_call, per_token, per_step = rates["cpu"]
    seconds = _seconds(work, per_token, per_step, per_pass=per_call)
    now = sum(_seconds(work, rates["wall"][1], rates["wall"][2], per_pass=rates["wall"][0]).values())
    seconds["load_model"] = model.load_seconds
    import resource

    resident = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # bytes on Linux
    peak = resident + _activation_bytes(run, tasks)
    return Estimate(work, seconds, peak / 2 ** 30, batch_size=batch, where=f"this machine when idle ({_cpu()}, "
                    f"{torch.get_num_threads()} threads, {run.config.device}, {model.dtype})",
                    host_call=per_call,
                    rates=f"timed forward of {len(prompts)} x {width} tokens, CPU seconds / {threads} threads: "
                          f"{per_call * 1e3:.1f} ms a call, {per_token * 1e3:.3f} ms a further token, "
                          f"{per_step * 1e3:.1f} ms a decoding step of {len(rows)} rows; at this moment's load "
                          f"(wall clock) ~{_duration(now + model.load_seconds)}")


def gpu_estimate(work: Work, run: Run, gpu: str, *, host_call: float = 0.0) -> Estimate:
    """Seconds, batch and peak memory on a named GPU in bfloat16 (`models.memory`'s planning);
    a call costs at least `host_call` (the Python and hook work of a one-token call, measured
    on this machine's CPU, which a GPU's host does too) and its kernel launches."""
    from locos_bench.models import memory

    memory_gib, tflops, bandwidth = GPUS[gpu]
    model = run.model
    geo = model.geometry
    params = sum(p.numel() for p in model.bridge.original_model.parameters())
    weights = params * memory.BYTES["bfloat16"]
    tokens = run.config.context_tokens
    free = memory_gib * memory.GIB - weights
    if free <= 0:
        raise LocosError(f"{run.config.model} needs {weights / memory.GIB:.1f} GiB of weights in bfloat16: more than "
                         f"the {memory_gib} GiB of a {gpu}")
    batch = memory.batch_size_for(geo, tokens, int(free), "bfloat16")
    flops_per_token = 2 * params + 4 * geo.n_layers * geo.n_heads * geo.d_head * tokens
    per_token = flops_per_token / (tflops * 1e12 * MFU)  # prefill is compute-bound
    overhead = max(LAUNCH * geo.n_layers, host_call)
    per_step = weights / (bandwidth * 1e12) + overhead  # a step reads every weight once
    seconds = _seconds(work, per_token, per_step, batch_ratio=run.config.batch_size / batch, per_pass=overhead)
    peak = weights + batch * memory.sequence_bytes(geo, tokens, "bfloat16")
    return Estimate(work, seconds, peak / memory.GIB, batch_size=batch,
                    where=f"{gpu} ({memory_gib:g} GiB, bfloat16, batch {batch} from free memory)",
                    rates=f"roofline: {tflops:g} TFLOP/s at {MFU:.0%} for prefill, {bandwidth:g} TB/s reading "
                          f"the weights per decoding step, {overhead * 1e3:.1f} ms a call (host or launches)")


def _seconds(work: Work, per_token: float, per_step: float, batch_ratio: float = 1.0,
             per_pass: float = 0.0) -> dict[str, float]:
    """Seconds by phase: prefill tokens at `per_token` (plus `per_pass` a call), decoding
    steps at `per_step`; a larger batch (`batch_ratio` < 1) takes fewer steps and passes."""
    phases = set(work.tokens) | set(work.steps)
    return {p: work.tokens.get(p, 0.0) * per_token + work.passes.get(p, 0.0) * per_pass * batch_ratio
            + work.steps.get(p, 0.0) * per_step * batch_ratio for p in sorted(phases)}


def _activation_bytes(run: Run, tasks: dict[str, Any]) -> int:
    """Beyond what is resident once the model is loaded: the largest shared decoding batch's
    activations, and every retrieval task's kept clean prefills (capped as the worker caps
    them: 2 GiB a task on a CPU)."""
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
    return decoding + kept


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


def format_estimate(plan: RunPlan, work: Work, estimates: list[Estimate]) -> str:
    """The dry run's lines: units by kind, forward passes by phase, each estimate."""
    units = ", ".join(f"{kind} {n}" for kind, n in work.units.items())
    detectors = ", ".join(d.name for d in plan.detectors)
    baselines = sum(1 for t in plan.tasks for k in plan.task_units(t.name) if k.detector == BASELINE)
    lines = [
        f"dry run: nothing scored, evaluated or written ({len(plan.tasks)} tasks, {len(plan.detectors)} detectors: {detectors})",
        f"  units           {sum(work.units.values())}: {units} ({baselines} unablated)",
        "  forward calls   " + ", ".join(f"{p} {n:,.0f}" for p, n in work.passes.items() if n)
        + f"; decoding steps {sum(work.steps.values()):,.0f}",
    ]
    for est in estimates:
        lines += [f"  on {est.where}",
                  f"    wall time     ~{_duration(est.total_seconds)} ("
                  + ", ".join(f"{p} {_duration(s)}" for p, s in est.seconds.items() if s >= 0.5) + ")",
                  f"    peak memory   ~{est.peak_gib:.{1 if est.peak_gib >= 1 else 2}f} GiB",
                  f"    rates         {est.rates}"]
    lines.append("  (identical head sets are evaluated once at run time: evaluation work is an upper bound)")
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
