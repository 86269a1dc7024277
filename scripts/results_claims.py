"""The claims of `docs/results/*.md`, generated from the published records (#50).

Each claim is a block of a results page between two markers,
`<!-- claims:NAME -->` and `<!-- /claims -->`, that `BLOCKS[NAME]` writes from the run's
`leaderboard/<run>/` records (`results.jsonl` + `manifest.json`) analysed by the leaderboard's
own `analyze_runs`: every figure at the rounding the page prints, and every verdict word
("separable", "not separable", a rank set, "the best") chosen by the run's own families and
estimates. Everything else on a page is prose that quotes no figure of the run, or a figure no
run records (wall times, the control probe's tables), which names its command, commit and CPU.
In the sections of `CHECKED`, every number and every "separable" must lie inside a block:
`tests/regression/test_results_pages.py` fails when a page differs from what this script writes
or quotes a figure outside a block.

    python scripts/results_claims.py           # rewrite the blocks
    python scripts/results_claims.py --check   # exit 1 if a page is out of date

The README's Results bullets are checked the same way by `tests/regression/test_published_claims.py`,
which reads the records with the helpers below.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python scripts/results_claims.py`
    sys.path.insert(0, str(ROOT))

from scripts._claims import PageError, Runs, run_loader  # noqa: E402
from scripts._claims_family import FAMILY_BLOCKS  # noqa: E402
from scripts._claims_gemma import GEMMA_BLOCKS  # noqa: E402
from scripts._claims_moe import MOE_BLOCKS  # noqa: E402
from scripts._claims_oracle import ORACLE_BLOCKS  # noqa: E402
from scripts._claims_planted import PLANTED_BLOCKS  # noqa: E402
from scripts._claims_sufficiency import SUFFICIENCY_BLOCKS  # noqa: E402

PAGES = Path("docs") / "results"
BLOCK = re.compile(r"(<!-- claims:(?P<name>[\w:-]+) -->\n)(?P<body>.*?)(\n<!-- /claims -->)", re.S)
NUMBER = re.compile(r"(?<![\w@/#.\-+])[+\-]?\d+(?:\.\d+)?(?!\w)")
VERDICT = re.compile(r"\bseparabl[ey]\b")


BLOCKS: dict[str, tuple[str, Callable[[Runs], str]]] = {**GEMMA_BLOCKS, **PLANTED_BLOCKS, **ORACLE_BLOCKS, **FAMILY_BLOCKS,
                                                      **MOE_BLOCKS, **SUFFICIENCY_BLOCKS}
"""Block name -> (the run it reads, what writes it)."""

CHECKED: dict[str, tuple[str, ...]] = {
    "gemma3-default-seed0.md": ("What it shows",),
    "gemma3-sufficiency-steering.md": ("What it shows",),
    "gemma3-sufficiency.md": ("What it shows",),
    "organism-reference.md": ("What the oracle is", "What it shows"),
    "oracle-real-weights.md": ("What it shows",),
    "organism-family.md": ("What it shows",),
    "organism-moe-reference.md": ("What it shows",),
    "organism-moe-experts.md": ("What it shows",),
    "planted-reference.md": ("What it shows",),
    "planted-nonliteral-reference.md": ("What it shows",),
    "planted-sufficiency-steering.md": ("What it shows",),
    "planted-nonliteral-sufficiency-steering.md": ("What it shows",),
}
"""Page -> its sections that quote the run's records: every figure there comes from a block."""


# -- the pages -----------------------------------------------------------------------------------------

def generated(text: str, get: Runs, blocks: dict = BLOCKS, stale: list[str] | None = None) -> str:
    """`text` with every block rewritten from the records. With `stale`, a block whose sentence
    the records no longer hold is left as it was and its `PageError` listed there (so one
    command names every block to reword); without, the first one is raised."""
    def write(m: re.Match) -> str:
        name = m.group("name")
        if name not in blocks:
            raise PageError(f"no block named {name!r} (BLOCKS has {', '.join(sorted(blocks))})")
        try:
            return m.group(1) + blocks[name][1](get) + m.group(4)
        except PageError as exc:
            if stale is None:
                raise
            stale.append(f"block {name}: {exc}")
            return m.group(0)

    return BLOCK.sub(write, text)


def sections(text: str, titles: Iterable[str]) -> list[str]:
    """The `## title` sections of `text`."""
    out = []
    for title in titles:
        parts = text.split(f"\n## {title}\n", 1)
        if len(parts) != 2:
            raise PageError(f"no section '## {title}'")
        out.append(parts[1].split("\n## ", 1)[0])
    return out


def unchecked(text: str, titles: Iterable[str]) -> list[str]:
    """Each number or "separable" in `text`'s `titles` sections that no block writes."""
    out = []
    for section in sections(text, titles):
        bare = re.sub(r"\]\([^)\s]*\)", "]", BLOCK.sub("", section))  # a link's address is no claim
        bare = re.sub(r"\bL\d+[HE]\d+\b|\bk ?= ?\d+\b", "", bare)  # unit names and budgets name, they do not measure
        for pattern in (NUMBER, VERDICT):
            for m in pattern.finditer(bare):
                out.append(f"{m.group()!r} is written by no block: ...{bare[max(0, m.start() - 60):m.end() + 20]!r}...")
    return out


def pages(root: Path = ROOT) -> list[Path]:
    return sorted((root / PAGES).glob("*.md"))


def problems(page: Path, text: str, get: Runs) -> list[str]:
    """What in `text` (the page at `page`) is not what the records say."""
    out = []
    if text != generated(text, get):
        out.append(f"{page.name}: a block differs from its records: run python scripts/results_claims.py")
    out += [f"{page.name}: {p}" for p in unchecked(text, CHECKED.get(page.name, ()))]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a page is out of date")
    args = parser.parse_args(argv)
    get = run_loader()
    bad = []
    for page in pages():
        text = page.read_text()
        if args.check:
            bad += problems(page, text, get)
            continue
        stale: list[str] = []
        new = generated(text, get, stale=stale)
        bad += [f"{page.name}: {line}" for line in stale]
        if new != text:
            page.write_text(new)
            print(f"wrote {page.relative_to(ROOT)}")
        bad += [f"{page.name}: {p}" for p in unchecked(new, CHECKED.get(page.name, ()))]
    print("\n".join(bad), file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
