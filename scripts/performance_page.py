"""The generated parts of `docs/performance.md`, built from what the project records.

Two blocks of the page are generated, each between a pair of markers
(`<!-- BEGIN GENERATED: name -->` ... `<!-- END GENERATED: name -->`):

* `published-runs`: one row per published run (`leaderboard/*/manifest.json`): the commit it
  ran from, when, its size and the seconds of each phase (the manifest's `timings`).
* `ratio-benchmarks`: the headline figures of each table of `benchmarks/RESULTS.md`, with the
  command that wrote the table, its commit and its CPU kind.

Everything else on the page is written by hand (figures no record holds: each names its
command, CPU and commit). `tests/unit/test_performance_page.py` fails when the committed page
differs from what this script generates, so a new manifest or benchmark table cannot leave the
page behind.

    python scripts/performance_page.py           # rewrite the generated blocks
    python scripts/performance_page.py --check   # exit 1 if the page is out of date
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = Path("docs") / "performance.md"
BEGIN = "<!-- BEGIN GENERATED: {name} (python scripts/performance_page.py) -->"
END = "<!-- END GENERATED: {name} -->"

PHASES = [("load_model", "load"), ("detect", "detect"), ("reference", "reference"), ("evaluate", "evaluate"),
          ("bottom_k", "bottom-k"), ("rank_diagnostic", "rank diag."), ("oracle_grid", "oracle grid"),
          ("sufficiency", "sufficiency"),
          ("steering", "steering")]


class PageError(Exception):
    """A record the page is built from is missing or not in the shape this script reads."""


def duration(seconds: float) -> str:
    """`27 min 22 s` from 1642.4; `10 s` below a minute (whole seconds, rounded)."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    return f"{whole // 60} min {whole % 60:02d} s"


# -- published runs ---------------------------------------------------------------------------


def published_runs(root: Path) -> str:
    """The table of every published run's phases, from its manifest."""
    manifests = sorted((root / "leaderboard").glob("*/manifest.json"))
    if not manifests:
        raise PageError(f"no published run under {root / 'leaderboard'}")
    header = ["run", "run from", "started (UTC)", "detectors", "eval examples per task",
              *(label for _, label in PHASES), "total"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    versions = set()
    for path in manifests:
        manifest = json.loads(path.read_text())
        try:
            timings, provenance = manifest["timings"], manifest["provenance"]
            commit, started = provenance["git_commit"][:7], provenance["started_at"]
            n_eval = sorted({len(task["splits"]["evaluation"]) for task in manifest["tasks"]})
            detectors = len(manifest["detectors"])
            packages = provenance["packages"]
            versions.add((packages["torch"], packages["transformers"], packages["transformer-lens"],
                          provenance["python"], provenance["device"]))
        except (KeyError, TypeError) as err:
            raise PageError(f"{path.relative_to(root)}: no {err} where a run manifest has one") from err
        name = path.parent.name
        page = root / "docs" / "results" / f"{name}.md"
        run = f"[{name}](results/{name}.md)" if page.exists() else f"`{name}`"
        phases = [str(round(timings[key])) if key in timings else "–" for key, _ in PHASES]
        row = [run, commit, started[:16].replace("T", " "), str(detectors), " / ".join(map(str, n_eval)), *phases,
               f"{duration(timings['total'])}"]
        lines.append("| " + " | ".join(row) + " |")
    stacks = "; ".join(f"torch {t}, transformers {tf}, TransformerLens {tl}, Python {py}, {dev}"
                       for t, tf, tl, py, dev in sorted(versions))
    lines += ["", "Phases in seconds, from each manifest's `timings`; *total* is its `timings.total` (the "
              "command's wall time adds Python's start-up and imports and the leaderboard's writing). "
              f"Versions, from the manifests' `provenance`: {stacks}."]
    return "\n".join(lines)


# -- ratio benchmarks -------------------------------------------------------------------------


def results_sections(text: str) -> list[tuple[str, str]]:
    """`(title, body)` of each table of RESULTS.md: a `#`/`##` heading whose body says which
    command wrote it; a heading without one (its *How to read*) belongs to the table above."""
    parts = re.split(r"^(#{1,2} .+)$", text, flags=re.M)
    sections: list[tuple[str, str]] = []
    for heading, body in zip(parts[1::2], parts[2::2], strict=True):
        title = heading.lstrip("#").strip()
        if "Written by `" in body or not sections:
            sections.append((title, body))
        else:
            sections[-1] = (sections[-1][0], sections[-1][1] + heading + body)
    return sections


def command_of(body: str) -> str:
    match = re.search(r"Written by `([^`]+)`", body)
    if not match:
        raise PageError("a RESULTS.md table does not say which command wrote it ('Written by `...`')")
    return match.group(1)


def commit_of(body: str) -> str:
    match = re.search(r"(?:commit:?|clean clone of)\s+([0-9a-f]{7,40})\b", body)
    if not match:
        raise PageError("a RESULTS.md table names no commit")
    return match.group(1)[:7]


def cpu_of(body: str) -> str:
    """The CPU kind a table names, in the page's words (performance.md's *CPU kinds*)."""
    if "AVX2 only" in body:
        return "AMD EPYC, AVX2"
    if "AVX-512 (no BF16, no AMX)" in body:
        return "Xeon, AVX-512"
    if "AMX" in body:
        return "Xeon, AMX"
    if re.search(r"AVX-512(/BF16| and AVX512_BF16| with BF16)", body):
        return "AMD EPYC, AVX-512/BF16"
    raise PageError("a RESULTS.md table names no CPU kind (AVX2 only, AVX-512/BF16, AVX-512 (no BF16, no AMX) or AMX)")


def table_rows(body: str) -> list[list[str]]:
    """The cells of every Markdown table row of `body`, separator rows left out."""
    rows = []
    for line in body.splitlines():
        if line.startswith("|") and not re.fullmatch(r"\|(\s*-+\s*\|)+", line.strip()):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def figure_table(body: str) -> dict[str, str]:
    """`name -> value` of a `| figure | value |` table."""
    return {row[0].strip("`"): row[1] for row in table_rows(body) if len(row) == 2 and row[0].startswith("`")}


def pick(values: dict[str, str], *names: str) -> str:
    missing = [name for name in names if name not in values]
    if missing:
        raise PageError(f"RESULTS.md has no figure {missing[0]!r}")
    return " / ".join(values[name] for name in names)


def ratio_figures(body: str) -> list[tuple[str, str]]:
    values = figure_table(body)
    return [
        ("`locos` time over a lean forward, 512 / 2,048 tokens", pick(values, "locos_over_forward_512",
                                                                       "locos_over_forward_2048")),
        ("`locos` peak memory over a forward's, 1k / 2k / 4k / 8k tokens",
         pick(values, *(f"locos_peak_mem_over_forward_{n}k" for n in (1, 2, 4, 8)))),
        ("a plain forward's peak memory (MB), 1k / 2k / 4k / 8k tokens",
         pick(values, *(f"forward_peak_mem_mb_{n}k" for n in (1, 2, 4, 8)))),
        ("`activation-patching`, forward equivalents", pick(values, "act_patching_forward_equivalents")),
        ("`attribution-patching` over a forward", pick(values, "attribution_patching_over_forward")),
        ("ablated evaluation, seconds per example over a forward's", pick(values, "eval_seconds_per_example_over_forward")),
        ("ablated generation over plain generation", pick(values, "ablated_generation_over_plain")),
    ]


def streaming_figures(body: str) -> list[tuple[str, str]]:
    rows = [row for row in table_rows(body) if len(row) == 9 and row[0].isdigit()]
    if not rows:
        raise PageError("RESULTS.md's streaming table has no rows")
    out = []
    for k in sorted({row[1] for row in rows}, key=int):
        chosen = [row for row in rows if row[1] == k]
        tokens = " / ".join(f"{int(row[0]) // 1024}k" for row in chosen)
        out.append((f"streaming over a plain forward, {k} heads full, {tokens} tokens",
                    " / ".join(row[4] for row in chosen)))
    return out


def scaling_figures(body: str) -> list[tuple[str, str]]:
    rows = {row[0].strip("`"): row for row in table_rows(body) if len(row) == 9}
    out = []
    for name in ("forward", "locos", "activation-patching", "evaluation"):
        if name not in rows:
            raise PageError(f"RESULTS.md's head-scaling table has no row {name!r}")
        row = rows[name]
        seconds = " / ".join(cell.split("/")[0].strip() for cell in row[2:5])
        label = f"`{name}`" if name not in ("forward", "evaluation") else name
        out.append((f"{label}: CPU s at 72 / 288 / 1,152 heads (time exponent)", f"{seconds} ({row[5]})"))
    return out


def sharing_figures(body: str) -> list[tuple[str, str]]:
    match = re.search(r"^- sharing / alone: ([0-9.]+) \(saved ([0-9.]+ s)\)", body, re.M)
    total = re.search(r"^\| \*\*all\*\* \| \*\*([0-9.]+)\*\* \| \*\*([0-9.]+)\*\*", body, re.M)
    same = re.search(r"^- scores identical: (\w+)", body, re.M)
    if not (match and total and same):
        raise PageError("RESULTS.md's shared-detection table lacks its 'sharing / alone', 'all' or "
                        "'scores identical' line")
    return [("the default run's detection, sharing passes over alone", f"{match.group(1)} "
             f"({total.group(2)} s against {total.group(1)} s)"),
            ("scores identical with and without sharing", same.group(1).lower())]


def oracle_step_figures(body: str) -> list[tuple[str, str]]:
    match = re.search(r"^- now / before: ([0-9.]+); gold log-probs agree to ([0-9.e+-]+)", body, re.M)
    rows = {row[0]: row for row in table_rows(body) if len(row) == 4}
    if not (match and {"before", "now"} <= set(rows)):
        raise PageError("RESULTS.md's oracle-step table lacks its 'before' / 'now' rows or 'now / before' line")
    return [("a greedy step of the oracle search, now over before",
             f"{match.group(1)} ({rows['now'][3]} s against {rows['before'][3]} s; gold agrees to {match.group(2)})")]


def prefill_chain_figures(body: str) -> list[tuple[str, str]]:
    match = re.search(r"^- chained / alone: ([0-9.]+); layer-passes ([0-9.]+); values and answers identical: (\w+)",
                      body, re.M)
    rows = {row[0]: row for row in table_rows(body) if len(row) == 3}
    if not (match and {"alone", "chained"} <= set(rows)):
        raise PageError("RESULTS.md's prefill-chain table lacks its 'alone' / 'chained' rows or 'chained / alone' line")
    return [("a run's evaluations of one task, chained prefills over alone",
             f"{match.group(1)} ({rows['chained'][2]} s against {rows['alone'][2]} s; layer-passes {match.group(2)})"),
            ("values and answers identical", match.group(3).lower())]


FIGURES: list[tuple[str, str, str, Callable[[str], list[tuple[str, str]]]]] = [
    ("Benchmark results", "LOCOS, patching and evaluation against a forward", "gemma3", ratio_figures),
    ("Streaming heads", "Streaming heads", "gemma3, one forward", streaming_figures),
    ("Head count scaling", "Head count scaling", "a random Qwen3-8B geometry at a tiny width", scaling_figures),
    ("Shared detection work", "Shared detection work", "gemma3, the default run's calibration sets",
     sharing_figures),
    ("One greedy step of the oracle search", "The oracle search's greedy step", "gemma3, kv-retrieval, 8 candidates",
     oracle_step_figures),
    ("The prefill chain", "The prefill chain in a run's evaluations", "gemma3, the default run's kv-retrieval units",
     prefill_chain_figures),
]
"""Each RESULTS.md table by the start of its title: the page's heading, what it ran on, the figures shown."""


def ratio_benchmarks(root: Path) -> str:
    """The headline figures of every table of `benchmarks/RESULTS.md`."""
    text = (root / "benchmarks" / "RESULTS.md").read_text()
    out = []
    for title, body in results_sections(text):
        known = next((rest for start, *rest in FIGURES if title.startswith(start)), None)
        if known is None:
            raise PageError(f"RESULTS.md's table {title!r} is new: say in scripts/performance_page.py "
                            "which of its figures the performance page shows")
        heading, subject, figures = known
        out += [f"### {heading}", "", f"`{command_of(body)}` ({subject}), commit {commit_of(body)}, {cpu_of(body)}:",
                "", "| figure | value |", "|---|---|"]
        out += [f"| {name} | {value} |" for name, value in figures(body)]
        out.append("")
    return "\n".join(out).rstrip("\n")


BLOCKS: dict[str, Callable[[Path], str]] = {"published-runs": published_runs, "ratio-benchmarks": ratio_benchmarks}


def generated_page(root: Path = ROOT) -> str:
    """`docs/performance.md` with every generated block rebuilt from the records."""
    text = (root / PAGE).read_text()
    for name, build in BLOCKS.items():
        begin, end = BEGIN.format(name=name), END.format(name=name)
        if text.count(begin) != 1 or text.count(end) != 1:
            raise PageError(f"{PAGE} must hold the markers {begin!r} and {end!r} once each")
        head, rest = text.split(begin)
        _, tail = rest.split(end)
        text = f"{head}{begin}\n{build(root)}\n{end}{tail}"
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/performance.md is out of date")
    args = parser.parse_args(argv)
    try:
        text = generated_page(ROOT)
    except PageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    current = (ROOT / PAGE).read_text()
    if args.check:
        if text != current:
            print(f"{PAGE} is out of date: run python scripts/performance_page.py", file=sys.stderr)
            return 1
        return 0
    if text != current:
        (ROOT / PAGE).write_text(text)
        print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
