"""Task files read their data relative to themselves, through lm-eval's public `TaskManager`
over a resolved copy of their folder (`lm_eval.taskfiles`), with no patch on lm-eval."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from locos_bench.lm_eval.taskfiles import resolved_file, resolved_folder

TASK = """# a comment lm-eval ignores
include: common.yaml
task: evens
process_docs: !function utils.keep_even
doc_to_text: "{{question}}"
doc_to_target: "{{answer}}"
"""
COMMON = """dataset_path: json
dataset_kwargs:
  data_files:
    test: data/docs.jsonl
test_split: test
output_type: generate_until
metadata:
  version: 2
"""
UTILS = """def keep_even(dataset):
    return dataset.filter(lambda doc: doc["n"] % 2 == 0)
"""


@pytest.fixture
def folder(tmp_path):
    tasks = tmp_path / "tasks"
    (tasks / "data").mkdir(parents=True)
    rows = [{"n": n, "question": f"q{n}", "answer": f"a{n}"} for n in range(6)]
    (tasks / "data" / "docs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tasks / "evens.yaml").write_text(TASK)
    (tasks / "common.yaml").write_text(COMMON)
    (tasks / "utils.py").write_text(UTILS)
    return tasks


def _docs(include: Path, task: str) -> list:
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=str(include), include_defaults=False)
    return list(manager.load([task])["tasks"][task].eval_docs)


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """Offline, in a working directory that is not the task folder."""
    pytest.importorskip("lm_eval")
    for var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.setenv(var, "1")
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")


def test_the_copy_reads_data_include_and_function_from_any_working_directory(folder, elsewhere):
    copy = resolved_folder(folder)
    assert [d["n"] for d in _docs(copy, "evens")] == [0, 2, 4]  # the data, through include and !function
    common = (copy / "common.yaml").read_text()
    assert str(folder / "data" / "docs.jsonl") in common
    assert (copy / "evens.yaml").read_bytes() == TASK.encode()  # nothing to resolve: byte for byte
    with pytest.raises(FileNotFoundError, match="docs.jsonl"):  # lm-eval on the folder itself, from here
        _docs(folder, "evens")


def test_an_include_outside_the_folder_is_made_absolute(folder, elsewhere):
    shared = folder.parent / "shared"
    shared.mkdir()
    (shared / "common.yaml").write_text(COMMON.replace("data/docs.jsonl", "../tasks/data/docs.jsonl"))
    (folder / "common.yaml").unlink()
    (folder / "evens.yaml").write_text(TASK.replace("include: common.yaml", "include: ../shared/common.yaml"))
    copy = resolved_folder(folder)
    assert f"include: {shared / 'common.yaml'}" in (copy / "evens.yaml").read_text()
    assert "process_docs: !function 'utils.keep_even'" in (copy / "evens.yaml").read_text()
    assert [d["n"] for d in _docs(copy, "evens")] == [0, 2, 4]


def test_the_cli_reads_include_path_and_task_files_through_their_copies(folder):
    from locos_bench._cli.lm_eval import _resolved

    out = _resolved(["run", "--model", "locos", "--tasks", f"evens,{folder / 'evens.yaml'}", str(folder / "evens.yaml"),
                     "--include_path", str(folder), "2", "--limit", "2"])
    tasks, include = out[4].split(","), out[7]
    assert tasks[0] == "evens" and Path(tasks[1]).name == "evens.yaml" and Path(tasks[1]).parent != folder
    assert Path(out[5]).name == "evens.yaml" and Path(out[5]).parent != folder  # --tasks takes several
    assert (Path(include) / "common.yaml").read_text() != COMMON and out[8:] == ["2", "--limit", "2"]
    assert Path(_resolved(["-t", str(folder / "evens.yaml")])[1]).parent != folder
    flag, _, path = _resolved([f"--include_path={folder}"])[0].partition("=")
    assert flag == "--include_path" and (Path(path) / "common.yaml").read_text() != COMMON
    assert _resolved(["ls", "tasks", "--include_path", str(folder)]) == ["ls", "tasks", "--include_path", str(folder)]
    assert resolved_file(folder / "evens.yaml").read_bytes() == TASK.encode()
