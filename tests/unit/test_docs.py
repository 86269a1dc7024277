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


# -- figures quoted from one source ---------------------------------------------------------------

PERFORMANCE = DOCS / "performance.md"
DEFAULT_RUN = "locos-bench run --detector all --model gemma3"
WALL = r"\d+ min \d{2} s|\d+ s"
QUOTING = [README, DOCS / "getting-started.md"]


def _costs() -> dict[str, tuple[str, str]]:
    """`command -> (wall, commit)` from the Performance page's *What each command costs* table."""
    section = PERFORMANCE.read_text().split("\n## What each command costs\n", 1)[-1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        match = re.match(rf"\| `(locos-bench [^`]+)` \| ({WALL}) \| [^|]+ \| ([0-9a-f]{{7,40}}) \|", line)
        if match:
            rows[match.group(1)] = (match.group(2), match.group(3))
    return rows


def _timed_commands(path: Path) -> dict[str, str]:
    """Each `locos-bench` command a page's bash blocks time in a trailing comment (`# 18 s`)."""
    timed = {}
    for block in re.findall(r"```bash\n(.*?)```", path.read_text(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            match = re.match(rf"(?:\.venv/bin/)?(locos-bench .*?)\s+#\s*({WALL})\s*$", line.strip())
            if match:
                timed[" ".join(match.group(1).split())] = match.group(2)
    return timed


def test_performance_page_times_the_default_run():
    assert DEFAULT_RUN in _costs(), "docs/performance.md's 'What each command costs' has no row for the default run"


@pytest.mark.parametrize("path", QUOTING, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_command_times_are_the_performance_pages(path):
    costs, timed = _costs(), _timed_commands(path)
    assert timed, f"{path.name} times no locos-bench command (a `# 18 s` comment)"
    wrong = {command: f"{time} here, {costs[command][0] if command in costs else 'no row'} in docs/performance.md"
             for command, time in timed.items() if costs.get(command, ("",))[0] != time}
    assert not wrong, f"{path.relative_to(ROOT)} times commands unlike docs/performance.md: {wrong}"


@pytest.mark.parametrize("path", QUOTING, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_default_run_time_is_the_performance_pages(path):
    wall, commit = _costs()[DEFAULT_RUN]
    prose = _prose(path.read_text())
    stated = re.findall(r"\d+ min \d{2} s", prose)
    assert stated, f"{path.relative_to(ROOT)} states no wall time for the default run"
    assert set(stated) == {wall}, f"{path.relative_to(ROOT)} states {sorted(set(stated))}; docs/performance.md: {wall}"
    if path.name != "README.md":  # the README states figures, and leaves their commit to the Performance page
        assert re.search(rf"\b{commit}\b", prose), f"{path.relative_to(ROOT)} states the default's time without its commit {commit}"



def test_results_index_walls_are_their_pages():
    """docs/results/index.md repeats each published run's wall time: it must be its page's."""
    index = DOCS / "results" / "index.md"
    rows = re.findall(r"^\| \[[^\]]+\]\(([\w.-]+\.md)\) \|.*\| ([^|]+) \|$", index.read_text(), re.M)
    assert len(rows) == len(list(ROOT.glob("leaderboard/*/manifest.json")))
    for page, wall in rows:
        stated = re.search(r"^\| wall \| (.*)$", (index.parent / page).read_text(), re.M)
        assert stated, f"docs/results/{page} has no '| wall |' row"
        for time in re.findall(WALL, wall):
            assert re.search(rf"(?<![\d.]){time}", stated.group(1)), f"docs/results/index.md: {page} took {wall.strip()}; the page says {stated.group(1)[:80]}"

# -- the API reference ---------------------------------------------------------------------------

def test_api_page_renders_every_public_name_from_where_it_lives():
    """docs/api.md renders (`::: module.name`) each name `locos_bench` exports, each path naming
    the very object `from locos_bench import NAME` gives, so a moved module breaks this test
    before it breaks the site."""
    import importlib

    import locos_bench

    refs = re.findall(r"^::: ([\w.]+)$", (DOCS / "api.md").read_text(), re.M)
    named = {}
    for ref in refs:
        module, _, name = ref.rpartition(".")
        if name in locos_bench.__all__:
            assert getattr(importlib.import_module(module), name) is getattr(locos_bench, name), (
                f"docs/api.md renders {ref}, which is not locos_bench.{name}")
            named[name] = ref
        else:
            importlib.import_module(ref)  # a module rendered whole (locos_bench.heads)
    missing = set(locos_bench.__all__) - set(named)
    assert not missing, f"docs/api.md leaves out public names {sorted(missing)}"
