"""Small helpers shared by subcommands."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def print_rows(rows: list[dict[str, Any]], *, as_json: bool, headers: list[str],
               cells: Callable[[dict[str, Any]], list[Any]], widths: list[int | None] | None = None) -> None:
    """What a listing command prints: its rows as JSON (`--json`), else a table of `cells(row)`
    per row, a column with a width in `widths` wrapped at word boundaries to it (a long
    description wraps instead of running past the terminal, where it would be cut)."""
    if as_json:
        print_json(rows)
        return
    from tabulate import tabulate

    print(tabulate([cells(r) for r in rows], headers=headers, maxcolwidths=widths))


def add_model_options(parser: Any, *, default: str | None = "gemma3") -> None:
    parser.add_argument("--model", default=default, help=f"model alias or HF id (default {default})")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--dtype", default=None, help="float32, bfloat16 or float16 (GPU); default bfloat16 on cuda, float32 on cpu")


def add_plugin_option(parser: Any) -> None:
    """`--plugin FILE.py` (repeatable): detectors from a file, for every command that names them."""
    parser.add_argument("--plugin", action="append", default=[], metavar="FILE.py",
                        help="a Python file whose @register_detector classes become detectors (repeatable; "
                             "also $LOCOS_BENCH_PLUGINS, separated by ':')")


def add_skip_bad_rows(parser: Any) -> None:
    """`--skip-bad-rows`, the same for every command that reads a task's rows."""
    parser.add_argument("--skip-bad-rows", action="store_true",
                        help="skip a bad row of a task's JSONL file with a warning instead of failing on it "
                             "(a run counts them in its manifest)")


def detector_class(name: str) -> type:
    """The registered class of detector `name` (one line with the nearest names when unknown);
    warnings from loading installed plugins go to stderr, one line each."""
    import warnings

    from locos_bench.detectors import get_detector_class

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cls = get_detector_class(name)
    for warning in caught:
        print(f"locos-bench: warning: {warning.message}", file=sys.stderr)
    return cls
