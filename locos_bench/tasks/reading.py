"""The one way loaders read data: `datasets.load_dataset`.

A hub id (`RMT-team/babilong`) goes to the Hugging Face hub when it is reachable; a local file
or directory in the release's own layout goes through the same call with the `json`, `parquet`
or `text` builder. Either way the loader sees a list of row dicts, and every failure is one
`LocosError` line that names the file (or hub id) and what is wrong. The one exception is a
user's own JSON Lines task file (`read_jsonl`), read a line at a time so that a bad row is
named by its row and line (`BadRow`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from locos_bench.errors import LocosError

_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".txt": "text"}


def _builder(files: Sequence[Path]) -> str:
    kinds = {_BUILDERS.get(p.suffix.lower()) for p in files}
    if None in kinds or len(kinds) != 1:
        names = ", ".join(p.name for p in files)
        raise LocosError(f"{names}: expected .json, .jsonl or .parquet files of one kind")
    return kinds.pop()  # type: ignore[return-value]


def _rows(ds: Any) -> tuple[dict[str, Any], ...]:
    return tuple(dict(row) for row in ds)


class EndOfData(LocosError):
    """The task's data holds no example at the index asked for: the stream has ended (a run
    reading ahead for its splits stops there, where another error skips one example)."""


class BadRow(LocosError):
    """A row of a user's data file that cannot become an example: not JSON, a field missing or
    of the wrong type, a needle found zero or several times, a span outside the text. Every
    command fails on it in one line naming the file, the row, its line and the field, unless
    told to skip bad rows (`--skip-bad-rows`; a run counts them in its manifest)."""


@dataclass(frozen=True)
class JsonlRow:
    """One row of a JSON Lines file: its line number, and the object on it (None where the
    line is not a JSON object, `problem` saying why)."""

    line: int
    value: dict[str, Any] | None
    problem: str = ""


@contextmanager
def _quiet() -> Iterator[None]:
    """No `Generating train split` bars, and no `datasets` error log (our own error names the
    file and row in one line), on stderr while a loader reads (restored after)."""
    import datasets

    was_disabled = datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()
    log = logging.getLogger("datasets")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)
        if not was_disabled:
            datasets.enable_progress_bars()


@lru_cache(maxsize=32)
def _cached_local(files: tuple[str, ...], stamp: tuple[float, ...]) -> tuple[dict[str, Any], ...]:
    import datasets

    paths = [Path(f) for f in files]
    builder = _builder(paths)
    kwargs = {"sample_by": "document"} if builder == "text" else {}
    try:
        with _quiet():
            ds = datasets.load_dataset(builder, data_files=list(files), split="train", **kwargs)
    except Exception as exc:  # arrow, json and parquet errors come in many types
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise LocosError(f"{', '.join(files)}: cannot read rows ({type(exc).__name__}: {first})") from None
    return _rows(ds)


def read_files(files: Iterable[Path]) -> tuple[dict[str, Any], ...]:
    """Rows of local JSON (a list of rows), JSONL or parquet files, read by `datasets`
    (one table; cached per process while the files are unchanged)."""
    paths = sorted(Path(f).resolve() for f in files)
    if not paths:
        raise LocosError("no data files given")
    for p in paths:
        if not p.is_file():
            raise LocosError(f"{p}: no such data file")
    return _cached_local(tuple(str(p) for p in paths), tuple(p.stat().st_mtime for p in paths))


def read_jsonl(path: Path) -> tuple[JsonlRow, ...]:
    """The rows of one JSON Lines file, a line at a time (blank lines are no rows, as for
    `datasets`), each with its line number; a line that is not a JSON object stays in its
    row's place, so the rows after it keep their numbers.

    Read with `json` rather than `datasets` (the one exception to the module's rule):
    `datasets` unifies each field's type over the whole file, so one row's `[1.5, 3]` span
    turns every row's spans into floats, and a bad row would be blamed on a good one."""
    path = Path(path).resolve()
    if not path.is_file():
        raise LocosError(f"{path}: no such data file")
    return _cached_jsonl(str(path), path.stat().st_mtime)


@lru_cache(maxsize=32)
def _cached_jsonl(file: str, stamp: float) -> tuple[JsonlRow, ...]:
    rows: list[JsonlRow] = []
    try:
        with open(file, encoding="utf-8", errors="replace") as handle:
            lines = list(handle)
    except OSError as exc:
        raise LocosError(f"{file}: cannot read ({exc.strerror or exc})") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            rows.append(JsonlRow(number, None, f"not valid JSON ({exc.msg} at column {exc.colno})"))
            continue
        except RecursionError:
            rows.append(JsonlRow(number, None, "not valid JSON (nested too deeply)"))
            continue
        if isinstance(value, dict):
            rows.append(JsonlRow(number, value))
        else:
            kind = "null" if value is None else _JSON_NAMES.get(type(value), type(value).__name__)
            rows.append(JsonlRow(number, None, f"a JSON {kind}, not an object"))
    return tuple(rows)


_JSON_NAMES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}


def read_text(path: Path) -> str:
    """A whole text file (a haystack book), read by `datasets`' `text` builder."""
    (row,) = read_files([path])
    return str(row["text"])


def hub_offline() -> bool:
    """Whether `HF_HUB_OFFLINE` / `HF_DATASETS_OFFLINE` forbid contacting the hub."""
    import datasets

    return bool(datasets.config.HF_HUB_OFFLINE)


@lru_cache(maxsize=8)
def read_hub(hub: str, config: str | None, split: str, where: str, local_hint: str) -> tuple[dict[str, Any], ...]:
    """Rows of `hub` (config, split) from the Hugging Face hub.

    Raises:
        LocosError: the hub is unreachable (or offline mode is on): one line saying how to
            point the task at local files instead (`local_hint`).
    """
    import datasets

    what = f"{hub} ({config or 'default'}, {split})"
    hint = f"without the hub, pass --data DIR (or source.args.path) with {local_hint}"
    if hub_offline():
        raise LocosError(f"{where}: the hub is offline (HF_HUB_OFFLINE) so {what} cannot be loaded; {hint}")
    try:
        with _quiet():
            ds = datasets.load_dataset(hub, config, split=split)
    except ValueError as exc:  # an unknown split lists the ones that exist
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise LocosError(f"{where}: {what}: {message}") from None
    except Exception as exc:  # network errors come in many types
        raise LocosError(f"{where}: cannot load {what} from the hub ({type(exc).__name__}); {hint}") from None
    return _rows(ds)


def require(row: dict[str, Any], fields: Iterable[str], source: str, row_no: int | str) -> None:
    """Raise one line naming the file, the row and the first missing field."""
    for name in fields:
        if row.get(name) is None:
            raise LocosError(f"{source}: row {row_no} has no field {name!r}")


def choose_split(available: dict[str, Any], split: str, source: str) -> Any:
    """`available[split]`, or one line listing the splits that exist."""
    if split not in available:
        names = ", ".join(sorted(available)) or "none"
        raise LocosError(f"{source}: no split {split!r}; splits here: {names}")
    return available[split]


def local_path(args: dict[str, Any], where: str) -> Path | None:
    """The local copy a task names (`source.args.path`, `--data`), None without one."""
    path = args.get("path")
    if path in (None, ""):
        return None
    p = Path(str(path)).expanduser()
    if not p.exists():
        raise LocosError(f"{where}: dataset path {str(p)!r} does not exist")
    return p


def offline(args: dict[str, Any], hub: str | None) -> tuple[bool, str]:
    """Whether a loader task's local copy is there, and a line saying where it reads from."""
    path = args.get("path")
    if path and Path(str(path)).expanduser().exists():
        return True, f"local copy at {path}"
    if path:
        return False, f"source.args.path {path} does not exist"
    where = f"the Hugging Face hub ({args.get('hub', hub)})" if hub else "a local copy"
    return False, f"needs {where} or source.args.path (--data PATH)"


def dataset_rows(args: dict[str, Any], where: str, *, hub: str, config: str | None, hub_split: str,
                 key: str, layout: Callable[[Path], dict[str, list[Path]]],
                 hint: str) -> tuple[tuple[dict[str, Any], ...], str]:
    """(rows, source name): from the hub without `path`, from one file, or from the files
    that a release directory's `layout` maps `key` (`config/split`) to."""
    local = local_path(args, where)
    if local is None:
        hub = args.get("hub", hub)
        return read_hub(hub, config, hub_split, where, f"the release's layout: {hint}"), hub
    if local.is_file():
        return read_files([local]), str(local)
    found = layout(local)
    if not found:
        raise LocosError(f"{local}: no {hint}")
    files = choose_split(found, key, str(local))
    return read_files(files), str(files[0]) if len(files) == 1 else str(local)


def data_tables(directory: Path) -> list[Path]:
    """Every JSON, JSONL and parquet file under `directory`."""
    return sorted(p for p in directory.rglob("*")
                  if p.is_file() and p.suffix.lower() in (".json", ".jsonl", ".parquet"))
