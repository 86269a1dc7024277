"""`locos-bench explain`: one answer explained as a self-contained HTML page.

Either `--task T --index I` (example I of the task, in the model's prompt format) or
`--prompt TEXT --answer TEXT --needle TEXT` (the prompt as is; `@FILE` reads a file). The page
goes to `--output` (written atomically); `--json` also prints its numbers. `--ablate`
mean-ablates the top heads over the task's reference split (as `locos-bench run --preset P`
builds it) and shows the greedy answer before and after. Beside it, sufficiency: the answer
with only the top heads full and every other head streaming (`--kv-sink`, `--kv-window`), and
the floor with every head streaming; a model whose attention cannot stream (eager) gets a note
on the page and on stderr instead. `--no-sufficiency` leaves it out (two greedy answers fewer).
`--steer-alpha A` also shows the answer with the top heads' outputs scaled by A.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from locos_bench._cli.common import add_model_options, print_json
from locos_bench.errors import LocosError
from locos_bench.names import head_name


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from locos_bench.run.config import PRESETS

    add_model_options(parser)
    parser.add_argument("--task", help="task name or YAML path (with --index)")
    parser.add_argument("--index", type=int, help="example index in the task (default 0)")
    parser.add_argument("--prompt", help="the prompt, fed as is (@FILE reads it from a file)")
    parser.add_argument("--answer", help="the gold answer to --prompt")
    parser.add_argument("--needle", action="append", default=[], metavar="TEXT",
                        help="text of the prompt the answer should come from (repeatable)")
    parser.add_argument("--distractor", action="append", default=[], metavar="TEXT",
                        help="look-alike evidence in the prompt (repeatable)")
    parser.add_argument("--question", metavar="TEXT", help="the question at the end of --prompt (not context)")
    parser.add_argument("--output", type=Path, default=Path("explain.html"), help="the page (default explain.html)")
    parser.add_argument("--json", action="store_true", help="also print the page's numbers as JSON")
    parser.add_argument("--top", type=int, default=5, metavar="N", help="top heads shown and ablated (default 5)")
    parser.add_argument("--ablate", action="store_true", help="mean-ablate the top heads; show the answer before and after")
    parser.add_argument("--preset", default="default", choices=sorted(PRESETS),
                        help="run preset whose reference split --ablate uses (default default)")
    parser.add_argument("--max-new-tokens", type=int, help="greedy budget (default: the task's, else 16)")
    parser.add_argument("--kv-sink", type=int, default=4, metavar="S",
                        help="sufficiency: first tokens a streaming head keeps (default 4)")
    parser.add_argument("--kv-window", type=int, default=64, metavar="W",
                        help="sufficiency: last tokens a streaming head keeps (default 64)")
    parser.add_argument("--no-sufficiency", dest="sufficiency", action="store_false",
                        help="leave out the sufficiency answers (top heads as the only full heads, and the floor)")
    parser.add_argument("--steer-alpha", type=float, metavar="A",
                        help="also answer with the top heads' outputs scaled by A (default: not)")


def _read_prompt(text: str) -> str:
    if not text.startswith("@"):
        return text
    path = Path(text[1:])
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise LocosError(f"--prompt {text}: cannot read {path}: {exc.strerror}") from None


def _span(prompt: str, text: str, flag: str) -> tuple[int, int]:
    if not text.strip():
        raise LocosError(f"{flag}: empty text")
    count = prompt.count(text)
    if count == 0:
        raise LocosError(f"{flag} {text!r} does not occur in the prompt")
    if count > 1:
        raise LocosError(f"{flag} {text!r} occurs {count} times in the prompt; give a longer, unique text")
    start = prompt.index(text)
    return start, start + len(text)


def prompt_example(prompt: str, answer: str, needles: list[str], distractors: list[str],
                   question: str | None):
    """An `Example` from free text: context is the prompt up to `question` (or all of it)."""
    from locos_bench.tasks import Example

    if not prompt.strip():
        raise LocosError("--prompt is empty")
    if not answer.strip():
        raise LocosError("--answer is empty")
    if not needles:
        raise LocosError("--prompt needs at least one --needle (the text the answer comes from)")
    q_span = _span(prompt, question, "--question") if question else None
    context = (0, q_span[0]) if q_span else (0, len(prompt))
    if context[1] == 0:
        raise LocosError("--question starts the prompt: there is no context before it")
    try:
        return Example(
            task="prompt", index=0, prompt=prompt, answers=[answer],
            target_prefix="" if prompt[-1:].isspace() else " ",
            needle_spans=[_span(prompt, n, "--needle") for n in needles],
            distractor_spans=[_span(prompt, d, "--distractor") for d in distractors],
            question_span=q_span, context_span=context,
        )
    except ValueError as exc:
        raise LocosError(str(exc).splitlines()[-1]) from None


def main(args: argparse.Namespace) -> int:
    import math

    from locos_bench.explain import explain, write_page
    from locos_bench.explain.attribution import KV_SINK, KV_WINDOW, headline_metric
    from locos_bench.models import load_model
    from locos_bench.run.config import check_streaming
    from locos_bench.tasks import load_task, make_example

    # Everything that can be checked without the model is checked first.
    if args.top < 1:
        raise LocosError(f"--top must be at least 1, got {args.top}")
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise LocosError(f"--max-new-tokens must be at least 1, got {args.max_new_tokens}")
    check_streaming(args.kv_sink, args.kv_window)
    if not args.sufficiency and (args.kv_sink, args.kv_window) != (KV_SINK, KV_WINDOW):
        raise LocosError("--kv-sink and --kv-window set the sufficiency answers, which --no-sufficiency leaves out")
    if args.steer_alpha is not None and not (math.isfinite(args.steer_alpha) and args.steer_alpha > 0):
        raise LocosError(f"--steer-alpha must be a finite number above 0, got {args.steer_alpha!r}")
    if (args.task is None) == (args.prompt is None):
        raise LocosError("give either --task T [--index I] or --prompt TEXT --answer TEXT --needle TEXT")
    spec = example = None
    if args.task is not None:
        if args.answer is not None or args.needle or args.distractor or args.question:
            raise LocosError("--answer, --needle, --distractor and --question go with --prompt, not --task")
        index = 0 if args.index is None else args.index
        if index < 0:
            raise LocosError(f"--index must be at least 0, got {index}")
        spec = load_task(args.task)
        if spec.kind != "retrieval":
            raise LocosError(f"task {spec.name!r} is a control task: it has no needle to explain the answer from")
    else:
        if args.index is not None:
            raise LocosError("--index goes with --task")
        if args.ablate:
            raise LocosError("--ablate needs --task: mean ablation uses the task's reference prompts")
        if args.answer is None:
            raise LocosError("--prompt needs --answer")
        example = prompt_example(_read_prompt(args.prompt), args.answer, args.needle, args.distractor, args.question)
    if args.output.is_dir():
        raise LocosError(f"--output {args.output} is a directory")

    model = load_model(args.model, device=args.device, dtype=args.dtype)
    reference = None
    if spec is not None:
        example = make_example(spec, index, model=model)
        if args.ablate:
            reference = reference_split(spec, model, args.preset)
    budget = args.max_new_tokens or (spec.max_new_tokens if spec is not None else 16)
    result = explain(model, example, top=args.top, reference=reference, max_new_tokens=budget,
                     metric=headline_metric(spec) if spec is not None else "contains",
                     sufficiency=args.sufficiency, kv_sink=args.kv_sink, kv_window=args.kv_window,
                     steer_alpha=args.steer_alpha)
    path = write_page(result, args.output)
    if args.json:
        print_json(result.to_json())
    if result.sufficiency and "unavailable" in result.sufficiency:
        print(f"note: no sufficiency on this page: {result.sufficiency['unavailable']}", file=sys.stderr)
    print(f"wrote {path} (top head {head_name(result.top[0])}; {result.verdict['mean']['text']})",
          file=sys.stderr)
    return 0


def reference_split(spec, model, preset: str):
    """The reference prompts a `locos-bench run --preset` of this task ablates with."""
    from locos_bench.run.config import PRESETS, RunConfig
    from locos_bench.run.splits import build_task_data

    sizes = {k: PRESETS[preset][k] for k in ("n_calib", "n_ref", "n_eval")}
    return build_task_data(spec, RunConfig(**sizes), model).reference
