"""`locos-bench lm-eval ARGS...`: lm-eval's own command line with the `locos` model registered.

lm-eval 0.4.13 finds models only through `@register_model` at import time, so a plain
`lm-eval --model locos` cannot see ours; this command imports `locos_bench.lm_eval.lm` and then
hands ARGS, unchanged, to lm-eval's CLI.
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS",
                        help="lm-eval's arguments, e.g. run --model locos --model_args model=gemma3,"
                             "heads=locos@niah-literal:16 --tasks arc_easy")


def main(args: argparse.Namespace) -> int:
    return run_lm_eval_cli(list(args.args))


def run_lm_eval_cli(argv: list[str]) -> int:
    """Run lm-eval's own CLI with `argv` unchanged, `locos` registered."""
    from lm_eval.__main__ import cli_evaluate

    import locos_bench.lm_eval.lm  # noqa: F401  (registers `locos`)

    saved = sys.argv
    sys.argv = ["lm-eval", *argv]
    try:
        cli_evaluate()
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    finally:
        sys.argv = saved
    return 0
