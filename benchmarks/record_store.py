"""The run directory's record store (issue #49): `results.jsonl` appended with one write and an
fsync per unit (what `run.rundir.RunDir` does) against a transactional SQLite store with a
unique key (the standard library's `sqlite3`, WAL, `synchronous=FULL`, one transaction per
unit), with and without `results.jsonl` kept current beside it (the published format).

The records are a published run's own lines (default: the gemma3 default run's 241), written
one by one into a fresh directory, read back as records, then opened again as a resuming run
does (every key known before the first write). Each figure is the median of `--repeats`
rounds, the stores taken alternately; wall seconds, on the disk `--dir` lives on.

    python benchmarks/record_store.py                         # leaderboard/gemma3-default-seed0
    python benchmarks/record_store.py --records leaderboard/planted-reference/results.jsonl
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import _cpu  # noqa: E402  (the machine)

from locos_bench.run.records import unit_from_json  # noqa: E402
from locos_bench.run.rundir import RunDir  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def jsonl_store(lines: list[bytes], where: Path) -> dict[str, float]:
    """`RunDir`: append each unit (its key checked), read back, open again to resume."""
    units = [unit_from_json(line) for line in lines]
    run = RunDir(where)
    start = time.perf_counter()
    for unit in units:
        run.append(unit)
    wrote = time.perf_counter()
    back = RunDir(where).read_units()
    read = time.perf_counter()
    again = RunDir(where)
    keys = {u.key for u in again.read_units(repair=True)}
    resumed = time.perf_counter()
    assert len(back) == len(keys) == len(units)
    return {"write": wrote - start, "read": read - wrote, "resume": resumed - read}


def sqlite_store(lines: list[bytes], where: Path, *, export: bool) -> dict[str, float]:
    """A table `units(key PRIMARY KEY, line)`: an insert per unit, each its own transaction
    (a duplicate key is refused by the database); with `export`, the line is also appended to
    `results.jsonl` and fsynced after each commit, so readers of the published file see it."""
    units = [unit_from_json(line) for line in lines]
    where.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    db = sqlite3.connect(where / "results.sqlite", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE IF NOT EXISTS units (key TEXT PRIMARY KEY, line TEXT NOT NULL)")
    for unit in units:
        line = unit.model_dump_json()
        with db:
            db.execute("INSERT INTO units VALUES (?, ?)", (repr(unit.key), line))
        if export:
            fd = os.open(where / "results.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, (line + "\n").encode())
                os.fsync(fd)
            finally:
                os.close(fd)
    db.close()
    wrote = time.perf_counter()
    db = sqlite3.connect(where / "results.sqlite")
    back = [unit_from_json(line) for (line,) in db.execute("SELECT line FROM units ORDER BY rowid")]
    db.close()
    read = time.perf_counter()
    db = sqlite3.connect(where / "results.sqlite")
    keys = {unit_from_json(line).key for (line,) in db.execute("SELECT line FROM units")}
    db.close()
    resumed = time.perf_counter()
    assert len(back) == len(keys) == len(units)
    return {"write": wrote - start, "read": read - wrote, "resume": resumed - read}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=Path, default=ROOT / "leaderboard/gemma3-default-seed0/results.jsonl")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None, help="where the stores are written (default: a temp dir)")
    args = parser.parse_args(argv)
    lines = [line for line in args.records.read_bytes().split(b"\n") if line.strip()]
    stores = {"jsonl (RunDir)": lambda d: jsonl_store(lines, d),
              "sqlite": lambda d: sqlite_store(lines, d, export=False),
              "sqlite + jsonl": lambda d: sqlite_store(lines, d, export=True)}
    figures: dict[str, dict[str, list[float]]] = {name: {} for name in stores}
    base = Path(tempfile.mkdtemp(prefix="record-store-", dir=args.dir))
    try:
        for repeat in range(args.repeats):
            for name, store in stores.items():
                where = base / f"{repeat}-{name.split()[0]}-{len(figures[name].get('write', []))}"
                for phase, seconds in store(where).items():
                    figures[name].setdefault(phase, []).append(seconds)
                shutil.rmtree(where)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"{len(lines)} records ({sum(map(len, lines)) / 1e6:.2f} MB) from {args.records}; {_cpu()}; "
          f"median of {args.repeats}, seconds")
    print("| store | write (each unit durable) | per unit (ms) | read back | resume |")
    print("|---|---|---|---|---|")
    for name, phases in figures.items():
        med = {phase: statistics.median(values) for phase, values in phases.items()}
        print(f"| {name} | {med['write']:.3f} | {1000 * med['write'] / len(lines):.2f} | {med['read']:.3f} | "
              f"{med['resume']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
