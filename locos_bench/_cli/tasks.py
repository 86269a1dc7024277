"""`locos-bench tasks [--json]`, `tasks show NAME`, `tasks eval NAME`."""

from __future__ import annotations

import argparse
import sys
import warnings
from typing import Any

from locos_bench._cli.common import add_model_options, add_skip_bad_rows, print_json, print_rows
from locos_bench.errors import LocosError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    sub = parser.add_subparsers(dest="tasks_command", metavar="{show,eval}")

    show = sub.add_parser("show", help="print examples with their spans marked")
    show.add_argument("name", help="task name or path to a task YAML")
    show.add_argument("--n", type=int, default=2, help="number of examples (default 2)")
    show.add_argument("--start", type=int, default=0, help="index of the first example")
    show.add_argument("--data", help="local dataset path for loader tasks (source.args.path)")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    add_skip_bad_rows(show)
    add_model_options(show, default=None)

    ev = sub.add_parser("eval", help="unablated accuracy of a model on a task, with a 95%% CI")
    ev.add_argument("name", help="task name or path to a task YAML")
    ev.add_argument("--n", type=int, default=24, help="number of examples (default 24)")
    ev.add_argument("--start", type=int, default=0, help="index of the first example")
    ev.add_argument("--batch-size", type=int, default=8, help="prompts per forward pass")
    ev.add_argument("--data", help="local dataset path for loader tasks (source.args.path)")
    ev.add_argument("--json", action="store_true", help="machine-readable output")
    add_skip_bad_rows(ev)
    add_model_options(ev, default="gemma3")


def _check_sizes(args: argparse.Namespace) -> None:
    """`--n`, `--start` and `--batch-size` in range, in one line naming the flag."""
    for flag, value, low in (("--n", args.n, 1), ("--start", args.start, 0),
                             ("--batch-size", getattr(args, "batch_size", 1), 1)):
        if value < low:
            raise LocosError(f"{flag} must be at least {low} (got {value})")


def main(args: argparse.Namespace) -> int:
    command = getattr(args, "tasks_command", None)
    if command in ("show", "eval"):
        _check_sizes(args)
    if command == "show":
        return _show(args)
    if command == "eval":
        return _eval(args)
    return _list(args)


# ---------------------------------------------------------------------------------------


def task_rows() -> list[dict[str, Any]]:
    """Every task found, with kind, source, version and offline availability. A YAML that
    fails to load is listed with its error instead of hiding the others."""
    from locos_bench.tasks import read_task_file, task_files
    from locos_bench.tasks.loaders import availability

    rows = []
    for name, path in task_files().items():
        try:
            spec = read_task_file(path)
        except LocosError as exc:
            rows.append({"name": name, "path": str(path), "error": str(exc), "offline": False})
            continue
        offline, note = availability(spec)
        source = spec.source.generator or spec.source.loader
        rows.append({
            "name": spec.name,
            "kind": spec.kind,
            "source": ("generator" if spec.source.generator else "loader") + f":{source}",
            "version": spec.version,
            "offline": offline,
            "availability": note,
            "metrics": spec.metrics,
            "context_lengths": spec.context_lengths,
            "chance": spec.chance,
            "description": spec.description,
            "path": str(path),
        })
    return rows


def _table_row(r: dict[str, Any]) -> list[Any]:
    if "error" in r:
        return [r["name"], "?", "?", "?", "no", f"ERROR: {r['error']}"]
    note = r["description"] if r["offline"] else f"{r['description']} ({r['availability']})".lstrip()
    return [r["name"], r["kind"], r["source"], r["version"], "yes" if r["offline"] else "no", note]


def _list(args: argparse.Namespace) -> int:
    print_rows(task_rows(), as_json=args.json, cells=_table_row, widths=[None, None, None, None, None, 56],
               headers=["task", "kind", "source", "version", "offline", "description"])
    return 0


def _spec_with_data(name: str, data: str | None) -> Any:
    from locos_bench.tasks import load_task
    from locos_bench.tasks.files import with_data

    spec = load_task(name)
    return with_data(spec, data) if data else spec


def _load(args: argparse.Namespace) -> Any:
    if not getattr(args, "model", None):
        return None
    from locos_bench.models import load_model

    return load_model(args.model, device=args.device, dtype=args.dtype)


def example_json(example: Any) -> dict[str, Any]:
    return {
        "task": example.task,
        "index": example.index,
        "prompt": example.prompt,
        "answers": list(example.answers),
        "target_prefix": example.target_prefix,
        "needle_spans": [list(s) for s in example.needle_spans],
        "distractor_spans": [list(s) for s in example.distractor_spans],
        "question_span": list(example.question_span) if example.question_span else None,
        "context_span": list(example.context_span) if example.context_span else None,
        "metadata": example.metadata,
    }


def mark_spans(example: Any) -> str:
    """The prompt with needles, distractors and the question bracketed."""
    marks: list[tuple[int, int, str]] = []
    for s in example.needle_spans:
        marks.append((s[0], s[1], "NEEDLE"))
    for s in example.distractor_spans:
        marks.append((s[0], s[1], "distractor"))
    if example.question_span:
        marks.append((*example.question_span, "QUESTION"))
    inserts: list[tuple[int, int, str]] = []  # (position, order, text)
    for start, end, label in marks:
        inserts.append((start, 1, f"[[{label}: "))
        inserts.append((end, 0, "]]"))
    text = example.prompt
    for pos, _, piece in sorted(inserts, key=lambda t: (t[0], t[1]), reverse=True):
        text = text[:pos] + piece + text[pos:]
    return text


def _show(args: argparse.Namespace) -> int:
    from locos_bench.tasks import make_examples

    spec = _spec_with_data(args.name, args.data)
    model = _load(args)
    examples = make_examples(spec, args.n, start=args.start, model=model, skip_bad_rows=args.skip_bad_rows)
    if args.json:
        print_json([example_json(e) for e in examples])
        return 0
    for e in examples:
        print(f"=== {e.task}[{e.index}]  answers={e.answers}  target_prefix={e.target_prefix!r}")
        meta = {k: v for k, v in e.metadata.items()}
        print(f"    metadata: {meta}")
        print(f"    needle_spans={[list(s) for s in e.needle_spans]} "
              f"distractor_spans={[list(s) for s in e.distractor_spans]} "
              f"question_span={list(e.question_span) if e.question_span else None}")
        print(mark_spans(e))
        print()
    return 0


def bootstrap_ci(values: list[float], *, confidence: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Bootstrap CI of the mean (BCa, falling back to percentile when BCa is degenerate)."""
    import numpy as np
    from scipy.stats import bootstrap

    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return (float("nan"), float("nan"))
    if data.size == 1 or np.all(data == data[0]):
        return (float(data[0]), float(data[0]))
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = bootstrap((data,), np.mean, confidence_level=confidence, n_resamples=2000,
                            method=method, random_state=np.random.default_rng(seed))
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if np.isfinite(low) and np.isfinite(high):
            return (low, high)
    return (float("nan"), float("nan"))


def _eval(args: argparse.Namespace) -> int:
    import time

    from locos_bench.evaluation import evaluate_task
    from locos_bench.tasks import make_examples

    spec = _spec_with_data(args.name, args.data)
    model = _load(args)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        examples = make_examples(spec, args.n, start=args.start, model=model, skip_errors=True,
                                 skip_bad_rows=args.skip_bad_rows)
    skipped = [str(w.message) for w in caught if str(w.message).startswith("skipped")]
    for message in skipped:
        print(f"locos-bench: warning: {message}", file=sys.stderr)
    if not examples:
        raise LocosError(f"task {spec.name!r}: no example could be made ({len(skipped)} skipped)")
    start = time.perf_counter()
    rows = evaluate_task(model, spec, examples, batch_size=args.batch_size)
    seconds = time.perf_counter() - start
    headline = spec.metrics[0] if spec.metrics else "rouge_l"
    scores = [r["score"] for r in rows]
    low, high = bootstrap_ci(scores)
    metric_names = list(dict.fromkeys([*spec.metrics, "rouge_l", "gold_logprob"]))
    summary = {
        "task": spec.name,
        "version": spec.version,
        "model": model.name,
        "prompt_format": examples[0].metadata.get("prompt_format"),
        "metric": headline,
        "accuracy": sum(scores) / len(scores),
        "ci95": [low, high],
        "chance": spec.chance,
        "n": len(rows),
        "skipped": len(skipped),
        "mean_context_tokens": sum(r["n_tokens"] for r in rows) / len(rows),
        "seconds_per_example": seconds / len(rows),
        "means": {m: sum(r[m] for r in rows) / len(rows) for m in metric_names},
    }
    if args.json:
        print_json({**summary, "examples": rows})
        return 0
    print(f"task {spec.name} v{spec.version} on {model.name} ({summary['prompt_format']} prompts)")
    chance = f"  (chance {spec.chance:.3f})" if spec.chance is not None else ""
    print(f"  {headline}: {summary['accuracy']:.3f}  95% CI [{low:.3f}, {high:.3f}]{chance}")
    print(f"  n={len(rows)}  skipped={len(skipped)}  "
          f"mean prompt tokens={summary['mean_context_tokens']:.0f}  "
          f"seconds/example={summary['seconds_per_example']:.2f}")
    print("  " + "  ".join(f"{m}={v:.3f}" for m, v in summary["means"].items()))
    return 0
