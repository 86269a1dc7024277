"""lm-eval tasks as control tasks of a run: per-document metric values with a head set ablated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.lm_eval.lm import LocosLM, check_lm_eval_version
from locos_bench.run.manifest import TaskEntry
from locos_bench.run.splits import ExternalControl


def task_values(loaded: Any, hooks: list, task: str, *, limit: int | None = None, batch_size: int = 4,
                include_path: str | Path | None = None) -> dict[str, list[float]]:
    """Per-example metric values of one lm-eval task with `hooks` active.

    Args:
        loaded: A `LoadedModel`.
        hooks: Ablation hooks (`ablation_hooks` or `HeadAblation(...).hooks()`); empty: unablated.
        task: An lm-eval task name, or a path to a task YAML file.
        limit: Evaluate the first `limit` documents only.
        include_path: Extra directory of task YAML files (lm-eval's `--include_path`).

    Returns:
        `{metric: [value per document]}` in document order; a metric of a filter other than
        `none` is named `metric/filter` (gsm8k's `exact_match/strict-match`). Metrics whose
        per-document value is not a number (corpus-level BLEU, perplexity pairs) are left out.
    """
    import lm_eval

    name, manager = _task_manager(task, include_path)
    lm = LocosLM.from_loaded(loaded, hooks, batch_size=batch_size)
    try:
        results = lm_eval.simple_evaluate(model=lm, tasks=[name], limit=limit, task_manager=manager,
                                          log_samples=True, bootstrap_iters=0, verbosity="ERROR")
    except LocosError:
        raise
    except Exception as exc:  # datasets raises many types when the hub is unreachable
        raise _task_error(name, exc, manager) from None
    samples = (results or {}).get("samples", {})
    if name not in samples:
        raise LocosError(f"lm-eval task {name!r} is a group or produced no per-example samples; name one task")
    return per_example(samples[name])


def describe_task(task: str, *, limit: int | None = None, include_path: str | Path | None = None) -> dict[str, Any]:
    """Name, version, metric names, documents used and their hash, of one lm-eval task.

    Loads the task's dataset, so a task that needs the unreachable hub fails here, before
    any evaluation runs."""
    import hashlib
    import json

    name, manager = _task_manager(task, include_path)
    try:
        loaded = manager.load([name])
    except Exception as exc:
        raise _task_error(name, exc, manager) from None
    if name in loaded["groups"] or name not in loaded["tasks"]:
        raise LocosError(f"lm-eval task {name!r} is a group; name its tasks one by one")
    obj = loaded["tasks"][name]
    docs = list(obj.eval_docs)
    docs = docs[: limit] if limit else docs
    filters = [f["name"] for f in getattr(obj.config, "filter_list", None) or []] or ["none"]
    metrics = [m if f == "none" else f"{m}/{f}" for f in filters for m in obj.higher_is_better()]
    digest = hashlib.sha256()
    for doc in docs:
        digest.update(json.dumps(doc, sort_keys=True, default=str, ensure_ascii=False).encode())
    version = (obj.config.metadata or {}).get("version", 0)
    return {"name": name, "version": int(float(version or 0)), "metrics": metrics,
            "n_docs": len(docs), "data_hash": digest.hexdigest()}


@dataclass
class LmEvalControl(ExternalControl):
    """An lm-eval task as a control task of a benchmark run (`run.splits.ExternalControl`):
    lm-eval evaluates its documents; `reference` is the run's first retrieval task's
    reference split, since mean ablation needs prompts of the heads' own task."""

    task: str
    reference: list
    info: dict[str, Any]
    include_path: str | None = None
    evaluation: tuple = ()

    @property
    def spec(self) -> Any:
        from types import SimpleNamespace

        return SimpleNamespace(name=f"lm-eval:{self.info['name']}", kind="control")

    @property
    def entry(self) -> TaskEntry:
        return TaskEntry(name=self.spec.name, version=self.info["version"], kind="control",
                         metrics=self.info["metrics"], splits={"evaluation": list(range(self.info["n_docs"]))},
                         data_hash=self.info["data_hash"])

    def values(self, model: Any, hooks: list, *, batch_size: int = 4) -> dict[str, list[float]]:
        return task_values(model, hooks, self.task, limit=self.info["n_docs"], batch_size=batch_size,
                           include_path=self.include_path)


def lm_eval_controls(tasks: list[str], source: Any, *, limit: int) -> list[LmEvalControl]:
    """`--lm-eval-tasks` of a run: each task's first `limit` documents (the run plan ablates each
    retrieval task's heads), with the reference split of the run's first retrieval task `source`."""
    check_lm_eval_version()
    return [LmEvalControl(task, list(source.reference), describe_task(task, limit=limit)) for task in tasks]


def _task_manager(task: str, include_path: str | Path | None) -> tuple[str, Any]:
    """lm-eval's task name and a TaskManager that knows it (a YAML path adds its folder)."""
    include = [str(Path(include_path).resolve())] if include_path else []
    if task.endswith((".yaml", ".yml")):
        path = Path(task)
        if not path.is_file():
            raise LocosError(f"lm-eval task file {task} does not exist")
        include = list(dict.fromkeys([*include, str(path.resolve().parent)]))
        task = _yaml_task_name(path)
    manager = _manager(tuple(include))
    if not manager.match_tasks([task]):
        from locos_bench.errors import did_you_mean

        raise LocosError(f"unknown lm-eval task {task!r}{did_you_mean(task, manager.all_tasks)}; "
                         "`lm-eval ls tasks` lists them, or give a task YAML file")
    return task, manager


def task_manager(include_path: str | Path | None = None) -> Any:
    """lm-eval's `TaskManager` with `include_path`, built once per path (indexing lm-eval's
    own tasks takes seconds); paths inside its task files are relative to each file (`taskfiles`)."""
    return _manager((str(Path(include_path).resolve()),) if include_path else ())


@lru_cache(maxsize=8)
def _manager(include: tuple[str, ...]) -> Any:
    from lm_eval.tasks import TaskManager

    from locos_bench.lm_eval.taskfiles import resolved_folder

    return TaskManager(include_path=[str(resolved_folder(path)) for path in include] or None)


def per_example(samples: list[dict[str, Any]]) -> dict[str, list[float]]:
    """`{metric: values}` from lm-eval's logged samples (one per document and filter)."""
    by_doc: dict[str, dict[int, float]] = {}
    for sample in samples:
        suffix = "" if sample.get("filter", "none") == "none" else f"/{sample['filter']}"
        for metric in sample.get("metrics", []):
            value = sample.get(metric)
            if isinstance(value, (bool, int, float)):
                by_doc.setdefault(metric + suffix, {})[int(sample["doc_id"])] = float(value)
    return {name: [docs[i] for i in sorted(docs)] for name, docs in by_doc.items()}


def _yaml_task_name(path: Path) -> str:
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError:
        data = None  # lm-eval's own loader also accepts `!function` tags; fall back to a line scan
    if isinstance(data, dict) and isinstance(data.get("task"), str):
        return data["task"]
    match = re.search(r"^task:\s*['\"]?([^'\"\s]+)", path.read_text(), re.M)
    if match is None:
        raise LocosError(f"lm-eval task file {path} has no `task:` name")
    return match[1]


def cli_error(exc: Exception, include_path: str | None = None) -> LocosError | None:
    """One line for what lm-eval's own command line raises as a traceback: an unknown task
    (with the nearest names), a dataset on the unreachable hub, no task or an unknown model;
    None for anything else."""
    text = f"{type(exc).__name__}: {exc}"
    missing = re.match(r"ValueError: Tasks not found: (.+)", text)
    if missing:
        from locos_bench.errors import did_you_mean

        names = [n.strip() for n in missing[1].split(", ") if n.strip()]
        known = _manager((str(Path(include_path).resolve()),) if include_path else ()).all_tasks
        hint = did_you_mean(names[0], known) if len(names) == 1 else ""
        return LocosError(f"unknown lm-eval task{'s' * (len(names) > 1)} {', '.join(map(repr, names))}{hint}; "
                          "`locos-bench lm-eval ls tasks` lists them; a folder of task YAML files needs "
                          "--include_path DIR")
    if _unreachable(text):
        return _task_error("", exc)
    if re.match(r"ValueError: (No tasks specified|Attempted to load model)", text):  # its own bad input
        return LocosError(f"lm-eval: {text.removeprefix('ValueError: ').splitlines()[0]}")
    return None


def _unreachable(text: str) -> bool:
    return any(word in text for word in ("offline", "Offline", "ConnectionError", "resolve", "Couldn't reach",
                                         "couldn't reach", "Max retries", "Network", "not find",
                                         "doesn't exist on the Hub"))


def _task_error(task: str, exc: Exception, manager: Any = None) -> LocosError:
    text = f"{type(exc).__name__}: {exc}"
    if not task:  # lm-eval's own command line: which of its tasks is not known here
        return LocosError("an lm-eval task loads its dataset from the Hugging Face hub, which cannot be reached "
                          f"from here ({text.splitlines()[0][:200]}); point it at local files: copy its YAML "
                          "with `dataset_path: json` and `dataset_kwargs: {data_files: {test: PATH.jsonl}}` and "
                          "pass its folder with --include_path (docs/lm-eval.md)")
    if _unreachable(text):
        where = ""
        entry = (manager.task_index if manager is not None else {}).get(task)
        yaml_path = getattr(entry, "yaml_path", None)
        if yaml_path:
            found = re.search(r"^dataset_path:\s*(\S+)", Path(yaml_path).read_text(), re.M)
            where = f" {found[1]!r}" if found else ""
        return LocosError(
            f"lm-eval task {task!r} loads its dataset{where} from the Hugging Face hub, which cannot be "
            "reached from here; point it at local files: copy its YAML with `dataset_path: json` and "
            "`dataset_kwargs: {data_files: {test: PATH.jsonl}}` and pass that YAML file (docs/lm-eval.md)"
        )
    return LocosError(f"lm-eval task {task!r} failed: {text.splitlines()[0][:300]}")
