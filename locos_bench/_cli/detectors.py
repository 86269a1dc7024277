"""`locos-bench detectors [--json]`: every registered detector, what it ranks (heads or
experts), where it comes from, its
parameters (with defaults), its cost class (forward passes per calibration example) and the
presets whose `--detector all` includes it."""

from __future__ import annotations

import argparse
import inspect
import sys
import warnings
from typing import Any

from locos_bench._cli.common import add_plugin_option, print_rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    add_plugin_option(parser)


def collect() -> list[dict[str, Any]]:
    """One row per detector; plugin warnings go to stderr as one line each."""
    from locos_bench.detectors import detector_names, detector_source, get_detector_class
    from locos_bench.detectors.registry import detector_unit

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        names = [*detector_names(), *detector_names("expert")]
    for warning in caught:
        print(f"locos-bench: warning: {warning.message}", file=sys.stderr)
    rows = []
    for name in names:
        row: dict[str, Any] = {"name": name, "source": detector_source(name), "unit": detector_unit(name)}
        try:
            cls = get_detector_class(name)
        except Exception as exc:  # a built-in whose module is missing must not hide the rest
            row.update(available=False, error=f"{type(exc).__name__}: {exc}", params={}, cost=None,
                       stochastic=None, presets=None, description="")
            rows.append(row)
            continue
        row.update(
            available=True,
            params=parameters(cls),
            cost=getattr(cls, "cost", "?"),
            stochastic=bool(getattr(cls, "stochastic", False)),
            presets=None if getattr(cls, "presets", None) is None else list(cls.presets),
            description=(inspect.getdoc(cls) or "").split("\n")[0],
        )
        rows.append(row)
    return rows


def parameters(cls: type) -> dict[str, Any]:
    """Constructor parameters and their defaults (`None` for a parameter without one)."""
    out: dict[str, Any] = {}
    for p in inspect.signature(cls.__init__).parameters.values():
        if p.name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        out[p.name] = None if p.default is p.empty else p.default
    return out


def _table_row(r: dict[str, Any]) -> list[Any]:
    params = ", ".join(f"{k}={v!r}" for k, v in r["params"].items()) or "-"
    cost = r["cost"] if r["available"] else "unavailable"
    note = r["description"] if r["available"] else r["error"]
    in_all = "every" if r.get("presets") is None else ", ".join(r["presets"]) or "none (named only)"
    return [r["name"], r["unit"], r["source"], cost, in_all, params, note]


def main(args: argparse.Namespace) -> int:
    print_rows(collect(), as_json=args.json, cells=_table_row, widths=[None, None, None, 30, 14, 30, 50],
               headers=["detector", "unit", "source", "forward passes / example", "in `all` of presets", "parameters", ""])
    return 0
