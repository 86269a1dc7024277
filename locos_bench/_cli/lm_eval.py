"""`locos-bench lm-eval ARGS...`: lm-eval's own command line with the `locos` model registered.

lm-eval 0.4.13 finds models only through `@register_model` at import time, so a plain
`lm-eval --model locos` cannot see ours; this command imports `locos_bench.lm_eval.lm` and then
hands ARGS to lm-eval's CLI (`_compat.lm_eval.run_cli`); paths inside task files are taken
relative to each file (`lm_eval.taskfiles`).
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS",
                        help="lm-eval's arguments, e.g. run --model locos --model_args model=gemma3,"
                             "heads=locos@niah-literal:16 --tasks arc_easy")


def main(args: argparse.Namespace) -> int:
    return run_lm_eval_cli(list(args.args))


def run_lm_eval_cli(argv: list[str]) -> int:
    """Run lm-eval's own CLI with `argv`, `locos` registered; a folder or file named by
    `--include_path` or `--tasks` is read through its resolved copy (`lm_eval.taskfiles`)."""
    import locos_bench.lm_eval.lm  # noqa: F401  (registers `locos`; a missing lm-eval is one line naming the extra)
    from locos_bench._compat.lm_eval import run_cli
    from locos_bench.lm_eval.controls import cli_error

    try:
        run_cli(_resolved(argv))
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    except Exception as exc:  # an unknown task or an unreachable dataset is one line, not lm-eval's traceback
        error = cli_error(exc, _flag(argv, "--include_path"))
        if error is None:
            raise
        raise error from None
    return 0


def _resolved(argv: list[str]) -> list[str]:
    """`argv` with `--include_path DIR` and each `--tasks` YAML file pointing at the copies in
    which a task file's data paths are relative to it (`lm_eval.taskfiles`); `ls` lists as is."""
    from pathlib import Path

    from locos_bench.lm_eval.taskfiles import resolved_file, resolved_folder

    if argv[:1] == ["ls"]:
        return list(argv)

    def include(value: str) -> str:
        return str(resolved_folder(value)) if Path(value).is_dir() else value

    def tasks(value: str) -> str:
        return ",".join(str(resolved_file(t)) if t.endswith((".yaml", ".yml")) and Path(t).is_file() else t
                        for t in value.split(","))

    rewrite = {"--include_path": include, "--tasks": tasks, "-t": tasks}
    out: list[str] = []
    taking = None  # the flag whose values follow: one for --include_path, any number for --tasks
    for word in argv:
        flag, eq, value = word.partition("=")
        if word.startswith("-"):
            taking = word if word in rewrite else None
            out.append(f"{flag}={rewrite[flag](value)}" if eq and flag in rewrite else word)
        elif taking is not None:
            out.append(rewrite[taking](word))
            taking = None if taking == "--include_path" else taking
        else:
            out.append(word)
    return out


def _flag(argv: list[str], name: str) -> str | None:
    for n, word in enumerate(argv):
        if word == name and n + 1 < len(argv):
            return argv[n + 1]
        if word.startswith(name + "="):
            return word.partition("=")[2]
    return None
