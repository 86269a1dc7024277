"""The README stays a front door and the docs stay one connected site.

Fast checks on the Markdown sources only; `.ci/run` builds the site with `mkdocs build --strict`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 150

FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)
DATED_LOG = [
    re.compile(r"\b(19|20)\d\d-[01]\d-[0-3]\d\b"),  # an ISO date
    re.compile(r"\b(January|February|March|April|May|June|July|August|September|October|November|December)"
               r"\s+(\d{1,2},\s+)?(19|20)\d\d\b"),
    re.compile(r"measured again|this session|session \d|this machine was|side by side", re.I),
    # a commit stamp ("at 3cd09a5", "commit 949919a"): 7 to 40 hex digits, a digit and a letter among them
    re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b"),
]
"""What marks a note as a log entry rather than a fact: when, in which session or at which
commit a figure was taken. The README states current figures and links to docs/performance.md,
where each figure keeps its provenance (command, CPU, commit); it holds none of these marks."""


def _pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def _prose(text: str) -> str:
    """The text without code blocks and code spans, where brackets are not links."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def _slug(heading: str) -> str:
    """The anchor Python-Markdown's toc (mkdocs) and GitHub both give a plain heading."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading)
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _links(path: Path) -> list[str]:
    return [m.group(1) for m in LINK.finditer(_prose(path.read_text()))]


def _nav_pages(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [p for value in node.values() for p in _nav_pages(value)]
    if isinstance(node, list):
        return [p for item in node for p in _nav_pages(item)]
    return []


def test_readme_is_at_most_150_lines():
    n = len(README.read_text().splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines; move detail into docs/ (at most {MAX_README_LINES})"


def test_readme_keeps_no_dated_measurement_log():
    text = README.read_text()
    found = [m.group(0) for pattern in DATED_LOG for m in pattern.finditer(text)]
    assert not found, (f"README.md holds dated or commit-stamped measurement notes {found}: state the figure "
                       "and leave its date or commit to docs/performance.md")


@pytest.mark.parametrize("note", ["23 min 56 s at 3cd09a5", "commit 949919a", "(f4dcf32)", "on 2025-03-01",
                                  "in March 2025", "measured again", "this session"])
def test_the_dated_log_rule_catches_each_kind_of_stamp(note):
    assert any(pattern.search(note) for pattern in DATED_LOG), note


@pytest.mark.parametrize("fact", ["23 min 56 s on a 2-core AMD EPYC", "sha256 of the GGUF", "1234567 tokens",
                                  "a decade", "bf16 and fp16", "L12H3"])
def test_the_dated_log_rule_lets_plain_facts_through(fact):
    assert not any(pattern.search(fact) for pattern in DATED_LOG), fact


def test_readme_keeps_the_two_commands():
    text = README.read_text()
    for command in ("bash scripts/setup.sh && .venv/bin/locos-bench run --detector all --model gemma3",
                    "bash scripts/setup.sh && .venv/bin/python -m pytest"):
        assert f"```bash\n{command}\n```" in text, f"README.md lost its command {command!r}"


def test_every_docs_page_is_in_the_nav():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert config["docs_dir"] == "docs"
    nav = _nav_pages(config["nav"])
    pages = {p.relative_to(DOCS).as_posix() for p in _pages()}
    assert pages, "docs/ holds no page"
    assert not pages - set(nav), f"pages missing from mkdocs.yml's nav: {sorted(pages - set(nav))}"
    assert not set(nav) - pages, f"mkdocs.yml's nav names missing pages: {sorted(set(nav) - pages)}"


@pytest.mark.parametrize("path", [README, *_pages()], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(path):
    broken = []
    for link in _links(path):
        if re.match(r"[a-z][a-z0-9+.-]*:", link, re.I):  # http:, https:, mailto:
            continue
        target, _, anchor = link.partition("#")
        file = (path.parent / target).resolve() if target else path
        if not file.exists():
            broken.append(f"{link} (no file {file.relative_to(ROOT) if file.is_relative_to(ROOT) else file})")
        elif anchor and file.suffix == ".md":
            anchors = {_slug(h) for h in HEADING.findall(FENCE.sub("", file.read_text()))}
            if anchor not in anchors:
                broken.append(f"{link} (no heading #{anchor} in {file.relative_to(ROOT)})")
    assert not broken, f"{path.relative_to(ROOT)}: broken links: {broken}"
