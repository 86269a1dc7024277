"""`locos-bench lm-eval ARGS...`: lm-eval's own command line with the `locos` model registered.

lm-eval 0.4.13 finds models only through `@register_model` at import time, so a plain
`lm-eval --model locos` cannot see ours; this command imports `locos_bench.lm_eval` and then
hands ARGS, unchanged, to lm-eval's CLI.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS",
                        help="lm-eval's arguments, e.g. run --model locos --model_args model=gemma3,"
                             "heads=locos@niah-literal:16 --tasks arc_easy")


def main(args: argparse.Namespace) -> int:
    from locos_bench.lm_eval import main as lm_eval_main

    return lm_eval_main(list(args.args))
