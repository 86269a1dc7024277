"""`locos-bench lm-eval ARGS...`: lm-eval's own command line with the `locos` model registered.

lm-eval 0.4.13 finds models only through `@register_model` at import time, so a plain
`lm-eval --model locos` cannot see ours; this command imports `locos_bench.lm_eval.lm` and then
hands ARGS, unchanged, to lm-eval's CLI; paths inside task files are taken relative to each file
(`lm_eval.taskfiles`).
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
    from locos_bench.lm_eval.lm import check_lm_eval_version  # registers `locos`

    check_lm_eval_version()  # before lm-eval's own import: a missing lm-eval is one line naming the extra
    from lm_eval.__main__ import cli_evaluate

    from locos_bench.lm_eval.controls import cli_error
    from locos_bench.lm_eval.taskfiles import resolving_everywhere

    saved = sys.argv
    sys.argv = ["lm-eval", *argv]
    try:
        with resolving_everywhere():  # a task file's data files are relative to it
            cli_evaluate()
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    except Exception as exc:  # an unknown task or an unreachable dataset is one line, not lm-eval's traceback
        error = cli_error(exc, _flag(argv, "--include_path"))
        if error is None:
            raise
        raise error from None
    finally:
        sys.argv = saved
    return 0


def _flag(argv: list[str], name: str) -> str | None:
    for n, word in enumerate(argv):
        if word == name and n + 1 < len(argv):
            return argv[n + 1]
        if word.startswith(name + "="):
            return word.partition("=")[2]
    return None
