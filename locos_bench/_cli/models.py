"""`locos-bench models [NAME] [--json]`."""

from __future__ import annotations

import argparse

from tabulate import tabulate

from locos_bench._cli.common import print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", help="load this model and print its head geometry")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16 (GPU)")


def main(args: argparse.Namespace) -> int:
    from locos_bench import models

    if args.name is None:
        rows = models.list_models()
        if args.json:
            print_json(rows)
        else:
            table = [
                [r["alias"] + (f" ({', '.join(r['also'])})" if r["also"] else ""),
                 r["resolves_to"], r["source"], "yes" if r["offline"] else "no", r["loads_from"]]
                for r in rows
            ]
            print(tabulate(table, headers=["alias", "resolves to", "source", "offline", "loads from"]))
            print("\nAny Hugging Face id (org/name) or local HF directory also works (needs the hub for ids).")
        return 0
    loaded = models.load_model(args.name, device=args.device, dtype=args.dtype)
    info = loaded.describe()
    if args.json:
        print_json(info)
    else:
        for key, value in info.items():
            print(f"{key:>16}: {value}")
    return 0
