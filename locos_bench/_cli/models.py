"""`locos-bench models [NAME] [--json] [--load]`."""

from __future__ import annotations

import argparse
from typing import Any

from locos_bench._cli.common import print_json, print_rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", help="print this model's head geometry (and memory estimate)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--load", action="store_true",
                        help="load the model even when its architecture numbers ship with locos-bench")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--dtype", default=None,
                        help="float32, bfloat16 or float16 (GPU); default bfloat16 on cuda, float32 on cpu")


def main(args: argparse.Namespace) -> int:
    from locos_bench import models
    from locos_bench.presets import preset_contexts

    if args.name is None:
        print_rows(models.list_models(), as_json=args.json, cells=_table_row,
                   headers=["alias", "resolves to", "kind", "source", "offline", "loads from"])
        if not args.json:
            print("\nAny Hugging Face id (org/name) or local HF directory also works (needs the hub for ids).")
            print("`locos-bench models NAME` prints a hub alias's geometry and memory estimate offline.")
        return 0
    spec = models.resolve_spec(args.name)
    if spec.config and not args.load:
        info = models.estimate_memory(args.name, preset_contexts(), dtype=args.dtype)
    else:
        # A planted model's answer key is looked up by alias: the loaded model carries none.
        info = models.describe_with_answer_key(models.load_model(args.name, device=args.device, dtype=args.dtype))
    if args.json:
        print_json(info)
    else:
        for key, value in info.items():
            print(f"{key:>26}: {value}")
    return 0


def _table_row(r: dict[str, Any]) -> list[Any]:
    also = f" ({', '.join(r['also'])})" if r["also"] else ""
    return [r["alias"] + also, r["resolves_to"], r["kind"], r["source"], "yes" if r["offline"] else "no", r["loads_from"]]
