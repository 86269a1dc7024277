"""The `locos-bench` command line.

Each subcommand lives in `locos_bench/_cli/<name>.py` with `add_arguments(parser)` and
`main(args) -> int`; this file only dispatches, so `locos-bench --help` stays fast (no torch).
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

from locos_bench.errors import LocosError

# name -> (module under locos_bench._cli, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "models": ("models", "list model aliases, or load one and print its head geometry"),
    "tasks": ("tasks", "list tasks, show examples, or measure unablated accuracy"),
    "detectors": ("detectors", "list registered head detectors"),
    "score": ("score", "score the heads of a model on a task with one detector"),
    "run": ("run", "the benchmark: detect, ablate the top-k heads, evaluate, leaderboard"),
    "sweep": ("sweep", "a grid of runs (models, seeds, presets, ...) and one combined leaderboard"),
    "leaderboard": ("leaderboard", "write the Markdown leaderboard of run directories"),
    "check": ("check", "compare a run against baselines; non-zero exit on any failure"),
    "explain": ("explain", "explain one answer: which heads wrote it, from which tokens (HTML page)"),
    "lm-eval": ("lm_eval", "lm-eval's CLI with the `locos` model (any lm-eval task, heads ablated)"),
}


class CommandParser(argparse.ArgumentParser):
    """argparse with the project's rule for bad input: no abbreviations (`--out` is not taken
    for `--output-dir`), and an error is one line with a hint, not a usage block. Subcommand
    parsers are of this class too (`add_subparsers` makes its own class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.subcommands: Any = None

    def add_subparsers(self, **kwargs: Any) -> Any:
        self.subcommands = super().add_subparsers(**kwargs)
        return self.subcommands

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:  # type: ignore[override]
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:  # said by the subcommand that was given them, so the hint is its --help
            self._innermost(parsed).error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed

    def _innermost(self, parsed: argparse.Namespace) -> CommandParser:
        action = self.subcommands
        child = action.choices.get(getattr(parsed, action.dest, None)) if action is not None else None
        return child._innermost(parsed) if isinstance(child, CommandParser) else self

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="locos-bench",
        description="Benchmark attention-head detectors under identical ablation budgets.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text)
        command.set_defaults(_module=module)
        try:
            mod = importlib.import_module(f"locos_bench._cli.{module}")
        except ModuleNotFoundError as exc:
            if exc.name != f"locos_bench._cli.{module}":
                raise
            command.set_defaults(_missing=True)
            continue
        mod.add_arguments(command)
    return parser


# Commands that hand everything after their name, unparsed, to another program's CLI.
PASSTHROUGH = {"lm-eval"}


def main(argv: list[str] | None = None) -> int:
    """Run one command; `argv` None: this process is `locos-bench` (its arguments, and Ctrl-C
    after the command is over ends it at once)."""
    parser = build_parser()
    program = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    at = next((i for i, a in enumerate(argv) if not a.startswith("-")), len(argv))
    if at < len(argv) and argv[at] in PASSTHROUGH:
        args = parser.parse_args(argv[: at + 1])
        args.args = argv[at + 1:]
    else:
        args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    if getattr(args, "_missing", False):
        print(f"locos-bench: error: `{args.command}` is not implemented yet", file=sys.stderr)
        return 2
    if not args.debug:  # a warning is one line, as an error is (--debug keeps where it came from)
        import warnings

        warnings.formatwarning = _one_line_warning
    with _ctrl_c(program):
        try:
            module = importlib.import_module(f"locos_bench._cli.{args._module}")
            if getattr(args, "plugin", None):
                from locos_bench.detectors.registry import load_plugin_files

                load_plugin_files(args.plugin)
            code = int(module.main(args) or 0)
            sys.stdout.flush()  # a closed pipe shows here, not at exit
            return code
        except BrokenPipeError:
            return _pipe_closed()
        except LocosError as exc:
            if args.debug:
                raise
            print(f"locos-bench: error: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("locos-bench: interrupted", file=sys.stderr)
            return 130


@contextmanager
def _ctrl_c(program: bool) -> Iterator[None]:
    """Ctrl-C while a command runs: the first raises `KeyboardInterrupt` (the command stops in
    order: a run keeps every finished unit and says how to resume); a second ends the process
    at once, as the signal's default does (exit status 130, nothing printed: a run directory
    survives a kill at any moment). When `program`, that default stays after the command, so
    a Ctrl-C during the interpreter's shutdown ends it at once too (no "Exception ignored").
    A SIGINT that is ignored (a background job) or handled by the caller is left alone."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return

    def first(signum: int, frame: object) -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, first)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_DFL if program else signal.default_int_handler)


def _one_line_warning(message: Warning | str, category: type[Warning], *args: object, **kwargs: object) -> str:
    return f"locos-bench: warning: {message}\n"


def _pipe_closed() -> int:
    """The reader of stdout went away (`locos-bench ... --json | head`): nothing more to say.
    Stdout is pointed at /dev/null so the interpreter's last flush cannot fail again, and the
    status is the one a shell reports for a process SIGPIPE ended (as `git log | head` gives)."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 141


if __name__ == "__main__":
    sys.exit(main())
