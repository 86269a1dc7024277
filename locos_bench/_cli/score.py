"""`locos-bench score`: score the heads of one model on one task with one detector.

Uses the task's first `--n` examples, the calibration split of a benchmark run. Prints the
layer x head scores and the top heads (`L{l}H{h}`); `--json` prints `detector`, `params`,
`scores` (nested list), `top` (ordered `[layer, head]` pairs), `seconds`, `forward_passes`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from locos_bench._cli.common import add_model_options, add_plugin_option, add_skip_bad_rows, detector_class, print_json
from locos_bench.errors import LocosError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_options(parser)
    parser.add_argument("--task", required=True, help="task name (see `locos-bench tasks`) or YAML path")
    parser.add_argument("--detector", required=True, help="detector name (see `locos-bench detectors`)")
    add_plugin_option(parser)
    parser.add_argument("--n", type=int, help="calibration examples (default: the task's calibration size)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the detector's rng and of the order of tied heads (default 0)")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                        help="detector parameter; VALUE is read as JSON, else as a string (repeatable)")
    parser.add_argument("--top", type=int, default=10, metavar="K", help="how many top heads to list (default 10)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    add_skip_bad_rows(parser)


def parse_params(items: list[str], cls: type | None = None) -> dict[str, Any]:
    """`--param KEY=VALUE` items as the detector's parameters: each VALUE read as the type of
    its default in `cls.__init__` (`gate=false` a bool, `batch_size=8` an int,
    `answer_tokens=first` a string as typed), else as JSON, else as a string. A VALUE that is
    not of its default's type is one line naming the parameter, the type and the default."""
    from locos_bench._cli.detectors import parameters

    defaults = parameters(cls) if cls is not None else {}
    name = getattr(cls, "name", "") or getattr(cls, "__name__", "?")
    params: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise LocosError(f"--param {item!r}: expected KEY=VALUE")
        default = defaults.get(key)
        if isinstance(default, str):
            params[key] = value
            continue
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
        kind = _TYPES.get(type(default))
        if kind is not None and not _is(parsed, type(default)):
            raise LocosError(f"--param {item}: detector {name!r}: {key} must be {kind} "
                             f"(default {json.dumps(default)})")
        params[key] = float(parsed) if isinstance(default, float) else parsed
    return params


_TYPES = {bool: "true or false", int: "a whole number", float: "a number"}


def _is(value: Any, kind: type) -> bool:
    if kind is bool or isinstance(value, bool):
        return isinstance(value, bool) and kind is bool
    return isinstance(value, int) if kind is int else isinstance(value, (int, float))


def _announce(detector: str, n: int, model: Any) -> None:
    """A `--n` far above any preset's calibration split, said before the minutes it takes:
    the forward passes the detector's declared cost implies, and that Ctrl-C stops it."""
    from locos_bench.harness.estimate import stated_passes

    passes = stated_passes(detector, model.geometry.n_total_heads, n)
    print(f"locos-bench: warning: --n {n:,} calibration examples (the presets use 2 to 200): {detector} makes "
          f"about {passes:,.0f} forward passes; making the examples first ... (Ctrl-C stops it)",
          file=sys.stderr, flush=True)


def main(args: argparse.Namespace) -> int:
    import numpy as np

    from locos_bench.detectors import detector_source, head_name, make_detector, run_detector
    from locos_bench.harness.driver import LARGE_SPLIT
    from locos_bench.models import load_model
    from locos_bench.tasks import load_task, make_examples

    # Everything that can be checked without the model is checked first.
    cls = detector_class(args.detector)
    detector = make_detector(args.detector, **parse_params(args.param, cls))
    spec = load_task(args.task)
    n = spec.sizes.calibration if args.n is None else args.n
    if n < 1:
        raise LocosError(f"--n must be at least 1, got {n}")
    if args.top < 1:
        raise LocosError(f"--top must be at least 1, got {args.top}")
    if args.seed < 0:
        raise LocosError(f"--seed must be a whole number of at least 0 (got {args.seed})")

    model = load_model(args.model, device=args.device, dtype=args.dtype)
    total = model.geometry.n_total_heads
    if args.top > total:
        raise LocosError(f"--top {args.top} is larger than the {total} heads of {model.name!r}")
    if n > LARGE_SPLIT:
        _announce(args.detector, n, model)
    examples = make_examples(spec, n, model=model, skip_bad_rows=args.skip_bad_rows)
    if n > LARGE_SPLIT:
        print(f"locos-bench: scoring {len(examples):,} examples with {args.detector} ...", file=sys.stderr, flush=True)
    if not examples:
        raise LocosError(f"task {spec.name!r}: every one of its first {n} rows is bad (see the warnings)")
    result = run_detector(detector, model, examples, rng=np.random.default_rng(args.seed))
    top = result.top_k(args.top, tie_seed=args.seed)  # a run ranks with its seed too

    if args.json:
        print_json({
            "detector": args.detector,
            "source": detector_source(args.detector),
            "params": result.params,
            "model": model.name,
            "task": spec.name,
            "examples": len(examples),
            "seed": args.seed,
            "scores": result.scores.detach().double().cpu().tolist(),
            "top": [list(h) for h in top],
            "seconds": round(result.seconds, 4),
            "forward_passes": result.forward_passes,
        })
        return 0

    from tabulate import tabulate

    scores = result.scores.detach().double().cpu()
    geo = model.geometry
    table = [[f"L{layer}", *(f"{float(s):.4g}" for s in scores[layer])] for layer in range(geo.n_layers)]
    print(f"{args.detector} on {model.name} / {spec.name} ({len(examples)} examples, seed {args.seed})")
    print(tabulate(table, headers=["", *(f"H{h}" for h in range(geo.n_heads))], disable_numparse=True))
    print(f"\ntop {args.top}: " + " ".join(head_name(h) for h in top))
    print(f"{result.forward_passes} forward passes, {result.seconds:.2f} s")
    return 0
