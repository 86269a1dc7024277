"""The researcher's loop as docs/running.md prints it (#36): a first run kept as a baseline, the
same run with one more detector from a file (the README's example), a check that the first
run's figures held, and the file's detector choosing an explain page's heads. Each command runs
as printed, in process, on the planted model, from an empty folder."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from locos_bench import cli
from locos_bench.explain.page import page_data

ROOT = Path(__file__).resolve().parents[2]


def loop_commands() -> list[list[str]]:
    """The `bash` block of docs/running.md's *A second experiment*, one argv per command."""
    section = (ROOT / "docs" / "running.md").read_text().split("## A second experiment", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1).replace("\\\n", " ")
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]


def readme_detector_file() -> str:
    """The README's detector example without its `run_benchmark` lines, as the docs say."""
    section = (ROOT / "README.md").read_text().split("## Your own detector", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1).split("\nrun = run_benchmark(")[0]


def test_the_documented_loop_runs_as_printed(tmp_path, monkeypatch, capsys):
    from locos_bench.detectors import registry

    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_detector.py").write_text(readme_detector_file())
    commands = loop_commands()
    assert [argv[:2] for argv in commands] == [["locos-bench", step] for step in
                                               ("run", "check", "run", "check", "explain")]
    said = []
    with registry.scoped_detectors():
        for argv in commands:
            code = cli.main(argv[1:])
            out, err = capsys.readouterr()
            assert code == 0, f"{shlex.join(argv)} exited {code}:\n{err}"
            said.append(out + err)
    assert "extending runs/planted-default-seed0 (+ detector needle-attention)" in said[2]
    assert (tmp_path / "baselines" / "mine.yaml").exists()
    page = page_data((tmp_path / "explain.html").read_text())
    assert page["detector"]["name"] == "needle-attention" and page["ablation"]["heads"] == page["top"]
