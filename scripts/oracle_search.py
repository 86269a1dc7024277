"""The oracle of a real model: the cross-fitted, pruned causal search (`evaluation.oracle_search`)
on the evaluation examples of the run it stands beside.

    .venv/bin/python scripts/oracle_search.py --model gemma3 [--ablations mean,mean-q] [--k-max 8] [--prune 8]

The splits are the run's own: `locos-bench run --model MODEL --preset PRESET --seed SEED` builds
the same reference (the means) and evaluation examples, checked by their hash. Per retrieval
task of the preset: necessity under each `--ablations` ablation and sufficiency (every other
head streaming, the preset's `--kv-sink` / `--kv-window`). Writes
one file per ablation's necessity search, `locos_bench/data/oracle/MODEL-ABLATION.json`, and one
of the sufficiency search (which ablates nothing), `MODEL-sufficiency.json`: shipped with the
package, a run records the sha256 of the file of its ablation and of the sufficiency file. It
prints the time it took. Every set's outcome is appended to `--resume-dir`/MODEL-TASK-MODE.jsonl
as it is measured: a rerun of the same command measures only what is missing.

Experts (`--unit expert`, a mixture of experts): the same search over sets of experts, ablated
as `locos-bench run --unit expert` ablates them; sufficiency keeps the set alone with every
other expert mean-ablated. Files `MODEL-expert-ABLATION.json` and `MODEL-expert-sufficiency.json`.
The MoE organism's (`docs/moe.md`):

    .venv/bin/python scripts/oracle_search.py --model organism-moe --unit expert --n-eval 64 \
        --batch-size 16 --k-max 3 --exhaustive-to 3 --threads 1
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from locos_bench.errors import LocosError  # noqa: E402

ORACLE_DIR = ROOT / "locos_bench" / "data" / "oracle"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    parser.add_argument("--model", default="gemma3")
    parser.add_argument("--preset", default="default")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tasks", help="retrieval tasks (default: the preset's)")
    for flag in ("--n-calib", "--n-ref", "--n-eval"):
        parser.add_argument(flag, type=int, help="as `locos-bench run` takes it (default: the preset's)")
    parser.add_argument("--ablations", default="mean", help="necessity under each (comma-separated): mean, mean-q, ...")
    parser.add_argument("--modes", default="necessity,sufficiency")
    parser.add_argument("--k-max", type=int, default=8)
    parser.add_argument("--prune", type=int, default=8, help="candidates per greedy step (0: every head)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, help="as `locos-bench run` takes it (default: the run's)")
    parser.add_argument("--unit", default="head", choices=("head", "expert"),
                        help="search sets of heads, or of a mixture of experts' experts (files MODEL-expert-*.json)")
    parser.add_argument("--exhaustive-to", type=int, default=1,
                        help="measure every set of up to this many units; greedy growth from there (default 1)")
    parser.add_argument("--resume-dir", type=Path, default=ROOT / "runs" / "oracle-search")
    parser.add_argument("--out-dir", type=Path, default=ORACLE_DIR,
                        help="where MODEL-ABLATION.json and MODEL-sufficiency.json are written "
                             "(default: locos_bench/data/oracle/)")
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else list(argv)
    try:
        return _run(args)
    except LocosError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            flags = Path("/proc/cpuinfo").read_text()
            extra = [f for f in ("avx512_bf16", "amx_tile") if f in flags]
            return line.split(":", 1)[1].strip() + (f" ({', '.join(extra)})" if extra else "")
    return platform.processor() or "unknown CPU"


def _run(args: argparse.Namespace) -> int:
    import torch

    from locos_bench.evaluation import oracle_search as osr
    from locos_bench.evaluation.oracle import all_heads
    from locos_bench.evaluation.task_eval import evaluate_task
    from locos_bench.interventions import AblationSpec, reference_means
    from locos_bench.models import load_model
    from locos_bench.run import RunConfig
    from locos_bench.run.provenance import data_hash
    from locos_bench.run.splits import build_run_tasks

    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    load = [round(x, 2) for x in os.getloadavg()]
    modes = [m for m in args.modes.split(",") if m]
    if set(modes) - set(osr.MODES):
        raise LocosError(f"--modes: unknown {sorted(set(modes) - set(osr.MODES))}; known: {', '.join(osr.MODES)}")
    experts = args.unit == "expert"
    parse = AblationSpec.expert if experts else AblationSpec.parse
    ablations = [parse(a) for a in args.ablations.split(",") if a]
    model = load_model(args.model)
    sizes = {name: getattr(args, name) for name in ("n_calib", "n_ref", "n_eval") if getattr(args, name) is not None}
    config = RunConfig(model=args.model, preset=args.preset, seed=args.seed, unit=args.unit, **sizes,
                       batch_size=args.batch_size,
                       **({"tasks": args.tasks.split(",")} if args.tasks else {})).resolved().for_model(model)
    tasks = {name: data for name, data in build_run_tasks(config, model).items() if data.spec.kind == "retrieval"}
    if experts:
        from locos_bench.evaluation.expert_oracle import every_expert, expert_measure
        from locos_bench.interventions.experts import expert_means
    heads = every_expert(model) if experts else all_heads(model)
    prefix = f"{args.model}-expert" if experts else args.model  # the files' and resume files' names
    prune = args.prune or None
    command = " ".join(["python scripts/oracle_search.py", *map(shlex.quote, args.argv)])
    header: dict[str, Any] = {
        "model": args.model, "resolves_to": model.spec.resolves_to, "n_heads": len(heads),
        "splits_from": {"preset": args.preset, "seed": args.seed, "n_ref": config.n_ref, "n_eval": config.n_eval},
        "search": {"k_max": args.k_max, "prune": prune, "greedy_on": "gold", "folds": 2,
                   **({"exhaustive_to": args.exhaustive_to} if args.exhaustive_to > 1 else {})},
        **({"unit": "expert"} if experts else {}),
        "command": command,
    }
    outs: dict[str, dict[str, Any]] = {}  # file label -> its contents
    if "necessity" in modes:
        for a in ablations:
            outs[str(a)] = {**header, "mode": "necessity", "ablation": str(a), "positionwise": a.positionwise,
                            "sink": a.sink, "tasks": {}}
    if "sufficiency" in modes:
        kept = ({"kept": "the set alone; every other expert mean-ablated"} if experts else
                {"streaming": {"kv_sink": config.kv_sink, "kv_window": config.kv_window}})
        outs["sufficiency"] = {**header, "mode": "sufficiency", "tasks": {}, **kept}
    for name, data in tasks.items():
        examples = data.evaluation
        items = [ex.item for ex in examples]
        base = lambda data=data: osr.Outcome.from_rows(evaluate_task(model, data.spec, data.evaluation,  # noqa: E731
                                                                     batch_size=config.batch_size))
        entry: dict[str, Any] = {"evaluation": [ex.index for ex in examples], "reference": [ex.index for ex in data.reference],
                                 "data_hash": data_hash(examples), "run_data_hash": data.entry.data_hash,
                                 "version": data.spec.version}
        identity = {"model": args.model, "task": name, "version": data.spec.version, "data_hash": entry["data_hash"],
                    "k_max": args.k_max, "prune": prune, "seed": args.seed,
                    **({"unit": "expert"} if experts else {}),
                    **({"exhaustive_to": args.exhaustive_to} if args.exhaustive_to > 1 else {})}
        ids = [t.input_ids for t in data.tokenized(model, "reference")]
        for label, out in outs.items():
            if label == "sufficiency" and experts:
                measure = expert_measure(model, data.spec, examples, expert_means(model, ids), mode="mean", keep=True,
                                         batch_size=config.batch_size)
                who = {"kept": out["kept"]}
            elif label == "sufficiency":
                measure = osr.sufficiency_measure(model, data.spec, examples, sink=config.kv_sink,
                                                  window=config.kv_window, batch_size=config.batch_size)
                who = {"streaming": out["streaming"]}
            elif experts:
                ablation = next(a for a in ablations if str(a) == label)
                means = expert_means(model, ids) if ablation.needs_reference else None
                measure = expert_measure(model, data.spec, examples, means, mode=ablation.mode,
                                         batch_size=config.batch_size)
                who = {"ablation": label}
            else:
                ablation = next(a for a in ablations if str(a) == label)
                means = reference_means(model, ids, positionwise=ablation.positionwise, site=ablation.site) \
                    if ablation.needs_reference else None
                measure = osr.necessity_measure(model, data.spec, examples, means, ablation,
                                                batch_size=config.batch_size)
                who = {"ablation": label}
            key = f"{prefix}-{name}-{label}"
            store = osr.SetStore(args.resume_dir / f"{key}.jsonl", {**identity, **who}, unit=args.unit)
            result = osr.search(heads, items, {out["mode"]: measure}, base, k_max=args.k_max, prune=prune,
                                seed=args.seed, store=store, log=lambda line, key=key: print(f"{key}: {line}", flush=True),
                                exhaustive_to=args.exhaustive_to)
            store.close()
            out["tasks"][name] = {**entry, "result": result}
    seconds = round(time.perf_counter() - started, 1)
    environment = {"cpu": _cpu(), "threads": args.threads, "torch": torch.__version__, "seconds": seconds,
                   "load_average_start": load, "load_average_end": [round(x, 2) for x in os.getloadavg()]}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for label, out in outs.items():
        path = args.out_dir / f"{prefix}-{label}.json"
        text = json.dumps({**out, "environment": environment}, separators=(",", ":"), sort_keys=True) + "\n"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(path)
        print(f"wrote {path} (sha256 {hashlib.sha256(text.encode()).hexdigest()[:12]})")
    print(f"searched in {seconds:.0f} s on {environment['cpu']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
