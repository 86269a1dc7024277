"""The Markdown leaderboard, its plots and `locos-bench leaderboard`, on synthetic run directories."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from locos_bench import cli
from locos_bench.errors import LocosError
from locos_bench.report.rendering.display import fmt, fmt_ci
from locos_bench.report.rendering.leaderboard import LEADERBOARD, analyze_runs, write_leaderboard
from locos_bench.report.rendering.markdown import render_markdown
from locos_bench.report.statistics.bootstrap import Estimate
from locos_bench.run import BASELINE, RunDir, RunPlan, load_run
from locos_bench.run.manifest import DetectorEntry, Manifest, Provenance, TaskEntry
from locos_bench.run.records import EvalUnit, RankUnit, ScoresUnit


def missing_units(manifest, units):
    plan = RunPlan.from_manifest(manifest)
    return plan.describe(plan.missing({u.key: u for u in units}))

N_EVAL = 24
BUDGETS = [1, 2, 4]
LAYERS, HEADS = 3, 4


def make_run(path: Path, *, model: str = "synthetic", seed: int = 0, crash: bool = True) -> Path:
    """A small but plausible run: `locos` collapses the retrieval task at k=1, `attention` only
    at k=4, `random` (3 draws) barely moves it, nothing hurts the control task much (it
    borrows the retrieval task's heads), and `crashy` fails to score the retrieval task."""
    rng = np.random.default_rng(seed)
    tasks = [
        TaskEntry(name="needle", version=1, kind="retrieval", metrics=["exact_match", "gold_logprob"],
                  splits={"calibration": list(range(8)), "reference": list(range(8, 12)),
                          "evaluation": list(range(12, 12 + N_EVAL))},
                  data_hash="ab" * 32, chance=0.25),
        TaskEntry(name="sums", version=1, kind="control", metrics=["exact_match", "gold_logprob"],
                  splits={"calibration": list(range(8)), "reference": list(range(8, 12)),
                          "evaluation": list(range(12, 12 + N_EVAL))},
                  data_hash="12e4" * 16, chance=0.5),
    ]
    detectors = [
        DetectorEntry(name="locos", params={"tokens": "mean"}, source="built-in", cost="1"),
        DetectorEntry(name="attention", params={}, source="built-in", cost="1"),
        DetectorEntry(name="random", params={}, source="built-in", cost="0", stochastic=True),
    ] + ([DetectorEntry(name="crashy", params={"x": 1}, source="plugin==0.1", cost="2")] if crash else [])
    manifest = Manifest(
        model=model, model_info={"resolves_to": f"org/{model}", "n_layers": LAYERS, "n_heads": HEADS},
        tasks=tasks, detectors=detectors, budgets=BUDGETS, ablation="mean", random_draws=3, seed=seed,
        rank_diagnostic=2, batch_size=4,
        provenance=Provenance(packages={"torch": "2.6.0", "locos-bench": "0.1.0"}, git_commit="abc123",
                              device="cpu", python="3.11.9", platform="Linux",
                              started_at="2025-01-01T00:00:00Z"),
        timings={"detect": 12.5, "evaluate": 40.25},
    )
    run = RunDir(path)
    run.write_manifest(manifest)

    def values(acc: np.ndarray, logp: np.ndarray) -> dict[str, list[float]]:
        return {"exact_match": acc.tolist(), "gold_logprob": logp.tolist()}

    scores = rng.random((LAYERS, HEADS))
    for task in tasks:
        acc = (rng.random(N_EVAL) < 0.9).astype(float)
        logp = rng.normal(-1.0, 0.3, N_EVAL)
        retrieval = task.kind == "retrieval"
        run.append(EvalUnit(task=task.name, detector=BASELINE, k=0, values=values(acc, logp),
                            generations=["x"] * N_EVAL, seconds=1.0))
        for det in detectors:
            for draw in range(3) if det.stochastic else [0]:
                # Like the harness: detectors score retrieval tasks; a control task borrows
                # the heads found on the first retrieval task.
                if det.name == "crashy":
                    if retrieval:
                        run.append(ScoresUnit(task=task.name, detector=det.name,
                                              error="RuntimeError: boom | bad shape\nTraceback ..."))
                    continue
                if retrieval:
                    run.append(ScoresUnit(task=task.name, detector=det.name, draw=draw,
                                          scores=(scores + draw).tolist(), seconds=2.0 + draw,
                                          forward_passes=8 * (1 + draw)))
                for k in BUDGETS:
                    if det.name == "locos" and retrieval:
                        a, lp = np.zeros(N_EVAL), logp - 3.0
                    elif det.name == "attention" and retrieval:
                        a = acc if k < 4 else np.zeros(N_EVAL)
                        lp = logp - (0.5 if k < 4 else 2.0)
                    elif det.name == "random":
                        a, lp = acc, logp - 0.05 * draw
                    else:
                        a, lp = acc, logp - 0.01 * k
                    run.append(EvalUnit(task=task.name, detector=det.name, draw=draw, k=k,
                                        heads=[[0, h] for h in range(k)], values=values(a, lp),
                                        heads_from="needle"))
                if det.name in ("locos", "attention") and draw == 0 and retrieval:
                    for r in (1, 2):
                        drop = 2.0 / r if det.name == "locos" else 0.1
                        run.append(RankUnit(task=task.name, detector=det.name, rank=r, head=[r, 0],
                                            values={"gold_logprob": (logp - drop).tolist()}))
    return path


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return make_run(tmp_path / "run-a")


def _table_after(md: str, heading: str) -> list[str]:
    """The Markdown table rows (lines starting with '|') after the first line containing heading."""
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if heading in line)
    rows, seen = [], False
    for line in lines[start + 1:]:
        if line.startswith("|"):
            rows.append(line)
            seen = True
        elif seen:
            break
    return rows


def _cells(row: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]


def test_fmt_fixed_and_no_negative_zero():
    assert fmt(-0.0001) == "0.000"
    assert fmt(-0.0) == "0.000"
    assert fmt(1.23456) == "1.235"
    assert fmt(None) == "—"
    assert fmt(float("nan")) == "nan"
    assert fmt_ci(Estimate(0.5, 0.25, 0.75), (0.5, 0.1)) == "0.500 [0.250, 0.750] ±0.100"


def test_writes_markdown_and_linked_pngs(run_dir: Path):
    path = write_leaderboard(run_dir, n_resamples=200)
    assert path == run_dir / LEADERBOARD
    md = path.read_text()
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    kinds = {Path(link).name.split("-")[0] for link in links}
    assert kinds == {"curves", "heatmap", "overlap"}
    assert sorted(links) == ["plots/curves-needle.png", "plots/curves-sums.png",
                             "plots/heatmap-needle.png", "plots/overlap-needle.png"]
    assert "its section shows their scores" in md  # sums borrows needle's heads
    for link in links:
        assert not Path(link).is_absolute()
        png = (run_dir / link).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        assert b"Software" not in png  # no version string: stable across matplotlib releases
    tasks = [_cells(r) for r in _table_after(md, "### Tasks")[2:]]
    assert tasks[0] == ["needle", "retrieval", "1", "exact_match", "0.250", "8", "4", "24", "abababababab"]
    assert tasks[1][4:] == ["0.500", "8", "4", "24", "12e412e412e4"]  # no number parsing by tabulate
    # Header facts from the manifest.
    for fact in ("abc123", "torch 2.6.0", "1, 2, 4", "mean (position-agnostic)", "org/synthetic",
                 "detect 12.5 s"):
        assert fact in md


def test_every_detector_has_its_own_colour_and_marker(tmp_path: Path):
    """The published gemma3 run's 12 detectors, and up to 40: no two share a (colour, marker)."""
    from locos_bench.report.rendering.plots import detector_styles
    from locos_bench.run import load_run

    manifest, _ = load_run(Path(__file__).resolve().parents[2] / "leaderboard" / "gemma3-default-seed0")
    names = [d.name for d in manifest.detectors]
    assert len(names) == 12
    for group in (names, [f"d{i}" for i in range(40)]):
        styles = detector_styles(group)
        assert len(set(styles.values())) == len(group)


def test_markdown_is_deterministic(tmp_path: Path):
    a = make_run(tmp_path / "a" / "run")
    b = make_run(tmp_path / "b" / "run")
    out_a = write_leaderboard(a, tmp_path / "out-a", n_resamples=300)
    out_b = write_leaderboard(b, tmp_path / "out-b", n_resamples=300)
    assert out_a.read_bytes() == out_b.read_bytes()
    for png in sorted((tmp_path / "out-a" / "plots").glob("*.png")):
        assert png.read_bytes() == (tmp_path / "out-b" / "plots" / png.name).read_bytes(), png.name
    # A different seed gives different resamples, so the text must change: the test can fail.
    c = make_run(tmp_path / "c" / "run", seed=1)
    assert write_leaderboard(c, tmp_path / "out-c", n_resamples=300, plots=False).read_bytes() \
        != out_a.read_bytes()


def test_task_table_is_ranked_and_shows_baseline_random_and_cost(run_dir: Path):
    md = render_markdown(analyze_runs(run_dir, n_resamples=200))
    rows = [_cells(r) for r in _table_after(md, "### Task `needle`")[2:]]
    names = [r[2] for r in rows]
    assert names == ["baseline (unablated)", "locos", "attention", "random (3 draws)", "crashy"]
    assert [r[0] for r in rows] == ["—", "1", "2", "3", "—"]  # rank sets on the headline
    assert [r[1] for r in rows] == ["—", "1", "2", "3", "—"]  # and on the gold log-prob
    locos = rows[1]
    # exact_match at k=1: collapsed on every one of the 24 examples, Wilson's interval, not a point
    assert locos[3] == "0.000 [0.000, 0.138]"
    random_row = rows[3]
    assert "±" in random_row[3]
    assert random_row[-2:] == ["3.0", "16"]  # mean seconds and forward passes over 3 draws
    assert rows[4][3] == "failed"
    # Per-rank diagnostic: locos' rank-1 head drops gold log-prob by 2, rank 2 by 1.
    ranks = {(_cells(r)[0]): _cells(r)[1:] for r in _table_after(md, "Per-rank diagnostic")[2:]
             if "needle" in md}
    assert ranks["locos"][:2] == ["L1H0 2.000", "L2H0 1.000"]


def test_failed_units_are_reported(run_dir: Path):
    md = render_markdown(analyze_runs(run_dir, n_resamples=100))
    rows = [_cells(r) for r in _table_after(md, "# Failed units")[2:]]
    assert rows == [["needle", "crashy", "0", "scores", "RuntimeError: boom \\| bad shape Traceback ..."]]
    clean = make_run(run_dir.parent / "clean", crash=False)
    assert "None: every unit finished without an error." in render_markdown(analyze_runs(clean, n_resamples=100))


def test_summary_table_specificity_and_versus(run_dir: Path):
    md = render_markdown(analyze_runs(run_dir, n_resamples=200))
    rows = {_cells(r)[1]: _cells(r) for r in _table_after(md, "Headline metric of each task")[2:]}
    assert list(rows)[0] == "locos"
    spec = float(rows["locos"][5].split()[0])
    assert spec > 0.5  # collapses retrieval, spares the control
    assert rows["locos"][6] == "—"  # not compared with itself
    assert rows["attention"][6].startswith("-0.688 [")  # the family's simultaneous interval
    assert rows["crashy"][2] == "0/1 + 0/1"


def test_several_runs_one_markdown(tmp_path: Path):
    a = make_run(tmp_path / "gemma", model="gemma3")
    b = make_run(tmp_path / "smol", model="smollm2", seed=3)
    with pytest.raises(LocosError, match="--out"):
        write_leaderboard([a, b])
    path = write_leaderboard([a, b], tmp_path / "board", n_resamples=100, plots=False)
    md = path.read_text()
    assert "## Summary across runs" in md
    assert "## Run 1: gemma3" in md and "## Run 2: smollm2" in md
    cross = [_cells(r) for r in _table_after(md, "## Summary across runs")[2:]]
    assert {r[1] for r in cross} == {"gemma3", "smollm2"}


def test_missing_units_named(run_dir: Path):
    manifest, units = load_run(run_dir)
    assert missing_units(manifest, units) == []
    kept = [u for u in units if not (isinstance(u, EvalUnit) and u.detector == "attention"
                                     and u.task == "sums" and u.k == 2)]
    kept = [u for u in kept if not (isinstance(u, ScoresUnit) and u.detector == "random" and u.draw == 2
                                    and u.task == "needle")]
    assert missing_units(manifest, kept) == ["scores needle/random draw 2", "eval sums/attention k=2"]


def _rewrite_results(run_dir: Path, keep) -> None:
    path = run_dir / "results.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(line for line in lines if keep(json.loads(line))))


def test_cli_writes_and_prints_json(run_dir: Path, tmp_path: Path, capsys):
    out = tmp_path / "out"
    assert cli.main(["leaderboard", str(run_dir), "--out", str(out), "--json", "--n-resamples", "100",
                     "--no-plots"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["leaderboard"] == str(out / LEADERBOARD)
    task = data["runs"][0]["tasks"][0]
    assert task["ranking"][:3] == ["locos", "attention", "random"]
    assert task["detectors"]["locos"]["curves"]["exact_match"]["values"]["1"]["value"] == 0.0
    assert (out / LEADERBOARD).exists()


@pytest.mark.parametrize("case, message", [
    ("missing", "does not exist"),
    ("no-manifest", "no manifest.json"),
    ("incomplete", "incomplete: 1 unit(s) missing (eval needle/locos k=4)"),
    ("no-baseline", "eval sums/baseline"),
    ("two-runs", "--out"),
])
def test_cli_errors_one_line_exit_2(case: str, message: str, run_dir: Path, tmp_path: Path, capsys):
    args = [str(run_dir)]
    if case == "missing":
        args = [str(tmp_path / "nope")]
    elif case == "no-manifest":
        (run_dir / "manifest.json").unlink()
    elif case == "incomplete":
        _rewrite_results(run_dir, lambda u: not (u["kind"] == "eval" and u["detector"] == "locos"
                                                 and u["task"] == "needle" and u["k"] == 4))
    elif case == "no-baseline":
        _rewrite_results(run_dir, lambda u: not (u["detector"] == BASELINE and u["task"] == "sums"))
    elif case == "two-runs":
        args = [str(run_dir), str(run_dir)]
    assert cli.main(["leaderboard", *args, "--no-plots"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("locos-bench: error:")
    assert message in err
    assert len(err.splitlines()) == 1
    assert not (run_dir / LEADERBOARD).exists()


def test_synthetic_fallbacks_are_named_in_the_header(run_dir: Path):
    run = analyze_runs([run_dir], n_resamples=50)[0]
    assert "synthetic fallbacks" not in render_markdown([run])
    run.manifest.fallbacks = {"babilong-synth": "babilong: needs the Hugging Face hub (offline)"}
    text = render_markdown([run])
    row = next(line for line in text.splitlines() if line.startswith("- **synthetic fallbacks**"))
    assert "`babilong-synth`: babilong: needs the Hugging Face hub (offline)" in row
