"""A user's JSONL task end to end: `locos-bench run --task PATH` on the planted model, and
`locos-bench tasks show` with the hub offline in a fresh process (the task format itself:
tests/unit/test_user_tasks.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from locos_bench.cli import main
from locos_bench.run import RunDir
from tests.unit.test_user_tasks import offline_hub, planted_rows, write_task  # noqa: F401 (autouse fixture)


@pytest.mark.slow
def test_run_takes_a_task_path_end_to_end(tmp_path, capsys):
    path = write_task(tmp_path, planted_rows(6), name="my-kv", prompt_format="completion",
                      metrics=["exact_match"], max_new_tokens=1)
    code = main(["run", "--model", "planted", "--task", str(path), "--detector", "locos,retrieval-head",
                 "--budgets", "1", "--n-calib", "2", "--n-ref", "2", "--n-eval", "2", "--random-draws", "1",
                 "--rank-diagnostic", "0", "--output-dir", str(tmp_path / "run"), "--quiet"])
    assert code == 0, capsys.readouterr().err
    manifest = RunDir(tmp_path / "run").read_manifest()
    assert [t.name for t in manifest.tasks] == ["my-kv"] and manifest.fallbacks == {}
    assert "my-kv" in (tmp_path / "run" / "leaderboard.md").read_text()


def test_hub_offline_from_the_environment_is_one_line(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_DATASETS_CACHE": str(tmp_path), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "locos_bench.cli", "tasks", "show", "musique"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2
    err = done.stderr.strip()
    assert len(err.splitlines()) == 1
    assert "hub is offline" in err and "dgslibisey/MuSiQue" in err and "--data DIR" in err
