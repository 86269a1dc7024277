"""`locos-bench explain`: one answer explained as a self-contained HTML page.

Either `--task T --index I` (example I of the task, in the model's prompt format) or
`--prompt TEXT --answer TEXT --needle TEXT` (the prompt as is; `@FILE` reads a file). The page
goes to `--output` (written atomically); `--json` also prints its numbers. `--ablate`
ablates the top heads (`--ablation`: mean by default, or zero, mean-q, zero-q) with means over
the task's reference split (as `locos-bench run --preset P` builds it) and shows the greedy
answer before and after. Beside it, sufficiency: the answer
with only the top heads full and every other head streaming (`--kv-sink`, `--kv-window`), and
the floor with every head streaming; a model whose attention cannot stream (eager) gets a note
on the page and on stderr instead. `--no-sufficiency` leaves it out (two greedy answers fewer).
`--steer-alpha A` also shows the answer with the top heads' outputs scaled by A.

The top heads are LOCOS's; `--detector NAME` (a built-in, or from `--plugin FILE.py`) makes
them that detector's top heads scored on this one example, the LOCOS and attention maps staying
for context. A stochastic detector (`random`) needs `--seed S`: its top heads are one draw.

`--unit expert` explains a mixture of experts' experts instead (`explain.experts`): the
`expert-locos` and routing maps, the tokens routed to each top expert with their gates, the
answer with the top experts ablated (`--ablation mean`, the default, or `mask`) and, with
`--task`, kept alone with every other expert mean-ablated. The streaming and steering options
act on heads and are refused.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from locos_bench._cli.common import add_model_options, add_plugin_option, detector_class, print_json
from locos_bench.errors import LocosError


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
    parser.add_argument("--detector", metavar="NAME",
                        help="whose top heads the page follows, scored on this one example (default: locos, "
                             "the page's own LOCOS map; see `locos-bench detectors`)")
    add_plugin_option(parser)
    parser.add_argument("--seed", type=int, metavar="S",
                        help="with --detector: seed of its rng and of the order of tied heads (default 0; "
                             "a stochastic detector such as random needs it: its top heads are one draw)")
    parser.add_argument("--ablate", action="store_true", help="ablate the top heads; show the answer before and after")
    parser.add_argument("--ablation", default=None, metavar="MODE",
                        help="how --ablate ablates: mean (default), zero, mean-q or zero-q (the heads' queries)")
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
    parser.add_argument("--unit", default="head", metavar="head|expert",
                        help="what the page explains: attention heads (default) or a mixture of experts' experts, "
                             "with expert-locos and routing maps; --ablation mean or mask")


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

    from locos_bench.explain import explain
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
    _check_unit(args)
    ablation = _ablation(args)
    detector = _detector(args)
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
        if args.ablate and ablation.needs_reference:
            raise LocosError(f"--ablate needs --task: {ablation} ablation uses the task's reference prompts")
        if args.answer is None:
            raise LocosError("--prompt needs --answer")
        example = prompt_example(_read_prompt(args.prompt), args.answer, args.needle, args.distractor, args.question)
    if args.output.is_dir():
        raise LocosError(f"--output {args.output} is a directory")
    from locos_bench.run.config import check_output_dir

    check_output_dir(args.output.parent, f"--output {args.output}: its folder", "folder")

    model = load_model(args.model, device=args.device, dtype=args.dtype)
    if args.unit == "expert":
        from locos_bench.run.config import unit_count

        unit_count("expert", model)  # a dense model: one line, before any example is read
    reference = [] if args.ablate else None  # filled where the ablation takes means
    expert_means = args.unit == "expert" and args.sufficiency  # kept alone: every other expert mean-ablated
    if spec is not None:
        example = make_example(spec, index, model=model)
        if (args.ablate and ablation.needs_reference) or expert_means:
            reference = reference_split(spec, model, args.preset)
    budget = args.max_new_tokens or (spec.max_new_tokens if spec is not None else 16)
    if args.unit == "expert":
        from locos_bench.explain.experts import explain_experts

        result = explain_experts(model, example, top=args.top, reference=reference,
                                 ablation=ablation.mode if args.ablate else None, sufficiency=args.sufficiency,
                                 max_new_tokens=budget, metric=headline_metric(spec) if spec is not None else "contains",
                                 detector=detector, seed=args.seed or 0)
        return _written(args, result)
    result = explain(model, example, top=args.top, reference=reference, max_new_tokens=budget,
                     metric=headline_metric(spec) if spec is not None else "contains",
                     sufficiency=args.sufficiency, kv_sink=args.kv_sink, kv_window=args.kv_window,
                     steer_alpha=args.steer_alpha, ablation=ablation, detector=detector, seed=args.seed or 0)
    return _written(args, result)


def _written(args: argparse.Namespace, result) -> int:
    """Write the page, print its JSON with `--json`, and say what it shows on stderr."""
    from locos_bench.explain import write_page
    from locos_bench.names import unit_name

    path = write_page(result, args.output)
    if args.json:
        print_json(result.to_json())
    if result.sufficiency and "unavailable" in result.sufficiency:
        print(f"note: no sufficiency on this page: {result.sufficiency['unavailable']}", file=sys.stderr)
    print(f"wrote {path} (top {args.unit} {unit_name(result.top[0], args.unit)}; {result.verdict['mean']['text']})",
          file=sys.stderr)
    return 0


def _check_unit(args: argparse.Namespace) -> None:
    """`--unit` known; an expert page without the options that act on heads."""
    from locos_bench.detectors.registry import UNITS
    from locos_bench.errors import unknown
    from locos_bench.explain.attribution import KV_SINK, KV_WINDOW

    if args.unit not in UNITS:
        raise unknown("--unit", args.unit, UNITS)
    if args.unit != "expert":
        return
    for flag, given in (("--steer-alpha", args.steer_alpha is not None), ("--kv-sink", args.kv_sink != KV_SINK),
                        ("--kv-window", args.kv_window != KV_WINDOW)):
        if given:
            raise LocosError(f"{flag} acts on attention heads; an expert page (--unit expert) cannot take it")


def _ablation(args: argparse.Namespace):
    """The `--ablation` of `--ablate` (mean by default); a scaling is `--steer-alpha`'s."""
    from locos_bench.interventions import AblationSpec

    if args.ablation is None:
        return AblationSpec.parse("mean")
    if not args.ablate:
        raise LocosError("--ablation says how --ablate ablates: give --ablate too")
    if args.unit == "expert":
        return AblationSpec.expert(args.ablation)
    ablation = AblationSpec.parse(args.ablation)
    if ablation.mode == "scale":
        raise LocosError(f"--ablation {args.ablation}: scaling the top heads is --steer-alpha")
    return ablation


def _detector(args: argparse.Namespace):
    """The `--detector` whose top heads the page follows (None: LOCOS's, the page's own map)."""
    from locos_bench.detectors import make_detector

    if args.detector is None:
        if args.seed is not None:
            raise LocosError("--seed goes with --detector (LOCOS's top heads involve no draw)")
        return None
    cls = detector_class(args.detector)
    ranks = getattr(cls, "unit", "head")
    if ranks != args.unit:
        raise LocosError(f"detector {args.detector!r} ranks {ranks}s, and this page explains {args.unit}s "
                         f"(--unit {ranks} explains {ranks}s; `locos-bench detectors` shows each unit)")
    if args.seed is not None and args.seed < 0:
        raise LocosError(f"--seed must be at least 0, got {args.seed}")
    if getattr(cls, "stochastic", False) and args.seed is None:
        raise LocosError(f"detector {args.detector!r} is stochastic: its top heads are one draw of its rng; "
                         "give --seed S to explain the draw of seed S")
    return make_detector(args.detector)


def reference_split(spec, model, preset: str):
    """The reference prompts a `locos-bench run --preset` of this task ablates with."""
    from locos_bench.run.config import PRESETS, RunConfig
    from locos_bench.run.splits import build_task_data

    sizes = {k: PRESETS[preset][k] for k in ("n_calib", "n_ref", "n_eval")}
    return build_task_data(spec, RunConfig(**sizes), model).reference
