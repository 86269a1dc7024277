"""lm-evaluation-harness integration: any lm-eval task with a head set ablated.

`import locos_bench.lm_eval` registers the lm-eval model `locos` (lm-eval 0.4.13 fills its
model registry only when `@register_model` runs on import; `pyproject.toml` also declares
the `lm_eval.models` entry point for versions that read it). Then::

    lm_eval.simple_evaluate(model="locos", model_args="model=gemma3,heads=locos@niah-literal:16",
                            tasks=["arc_easy"])
    locos-bench lm-eval --model locos --model_args model=gemma3,heads=L3H1;L7H2,reference=kv-retrieval ...

`LocosLM` is built on the project's own pieces: `models.load_model` for the model, the
harness's splits and detectors for head sets, `ablation.HeadAblation` for the hooks (active
in every forward pass, prefill and KV-cached decoding alike) and `evaluate` for batched
scoring and greedy generation. Tokenisation follows lm-eval's `hf` backend (`TemplateLM`),
so unablated results match `--model hf` on the same weights (tested).

Head sets (`heads=`):

* `DETECTOR@TASK:K` — the detector's top K heads, scored on the fly on TASK's calibration
  split exactly as `locos-bench run --preset P --seed S` would (same split, same seed);
* `L3H1;L7H2` — an explicit list (mean ablation then needs `reference=TASK`);
* `RUN_DIR:DETECTOR@TASK:K` — the top K of the head scores recorded in a run directory.

Mean ablation uses the reference split of the head set's task (or of `reference=`).
"""

from __future__ import annotations

import re
import sys
import warnings
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from locos_bench.errors import LocosError

SUPPORTED_LM_EVAL = ">=0.4.13,<0.5"
"""lm-eval versions this module is tested against (the CI installs 0.4.13)."""

Head = tuple[int, int]
_HEAD = re.compile(r"^L(\d+)H(\d+)$")
_SCORED = re.compile(r"^(?:(?P<run>.+):)?(?P<detector>[^:@]+)@(?P<task>[^:@]+):(?P<k>[^:@]+)$")


def check_lm_eval_version(version: str | None = None) -> str:
    """The installed lm-eval version, or a `LocosError` naming the supported range."""
    from packaging.specifiers import SpecifierSet

    if version is None:
        try:
            version = metadata.version("lm_eval")
        except metadata.PackageNotFoundError:
            raise LocosError(
                "lm-eval is not installed: pip install 'locos-bench[lm-eval]' "
                f"(lm-eval{SUPPORTED_LM_EVAL})"
            ) from None
    if version not in SpecifierSet(SUPPORTED_LM_EVAL):
        raise LocosError(
            f"lm-eval {version} is outside the tested range lm-eval{SUPPORTED_LM_EVAL}; "
            f"install a supported version: pip install 'lm-eval{SUPPORTED_LM_EVAL}'"
        )
    return version


check_lm_eval_version()

import lm_eval.models  # noqa: E402  (fills the lazy registry first: `get_model` only does so when it is empty)
from lm_eval.api.model import TemplateLM  # noqa: E402
from lm_eval.api.registry import register_model  # noqa: E402


# ---------------------------------------------------------------------------------------
# Head sets


@dataclass(frozen=True)
class HeadSet:
    """A resolved `heads=` argument.

    Attributes:
        heads: The heads to intervene on, best first.
        task: The task whose reference split gives the mean activations (None: none needed).
        source: How the set was chosen, for lm-eval's results (`locos@kv-retrieval:8`).
    """

    heads: list[Head]
    task: str | None
    source: str


def parse_heads(text: str) -> tuple[str, dict[str, Any]]:
    """Split a `heads=` value into its kind (`none`, `list`, `scored`, `run`) and parts."""
    text = (text or "").strip()
    if text.lower() in ("", "none"):
        return "none", {}
    items = [t for t in re.split(r"[;\s]+", text) if t]
    if all(_HEAD.match(t) for t in items):
        return "list", {"heads": list(dict.fromkeys((int(m[1]), int(m[2])) for m in map(_HEAD.match, items)))}
    match = _SCORED.match(text)
    if match is None:
        raise LocosError(
            f"unknown head spec {text!r}; use DETECTOR@TASK:K (locos@niah-literal:16), "
            "an explicit list (L3H1;L7H2) or RUN_DIR:DETECTOR@TASK:K"
        )
    try:
        k = int(match["k"])
    except ValueError:
        raise LocosError(f"head spec {text!r}: K must be a whole number, got {match['k']!r}") from None
    if k < 1:
        raise LocosError(f"head spec {text!r}: K must be at least 1")
    parts = {"detector": match["detector"], "task": match["task"], "k": k}
    if match["run"]:
        return "run", {**parts, "run": match["run"]}
    return "scored", parts


def resolve_heads(text: str, model: Any, *, preset: str = "default", seed: int = 0,
                  reference: str | None = None) -> HeadSet:
    """Resolve a `heads=` value against a loaded model (see the module docstring)."""
    kind, parts = parse_heads(text)
    geo = model.geometry
    if kind == "none":
        return HeadSet([], reference, "none")
    if kind == "list":
        for layer, head in parts["heads"]:
            if layer >= geo.n_layers or head >= geo.n_heads:
                raise LocosError(
                    f"head L{layer}H{head} is outside the model: {model.name} has "
                    f"{geo.n_layers} layers x {geo.n_heads} heads (L0H0 .. L{geo.n_layers - 1}H{geo.n_heads - 1})"
                )
        return HeadSet(parts["heads"], reference, ";".join(f"L{l}H{h}" for l, h in parts["heads"]))
    k = parts["k"]
    if k > geo.n_total_heads:
        raise LocosError(f"head spec {text!r}: K={k} is more than the model's {geo.n_total_heads} heads")
    scores = _run_scores(model, **parts) if kind == "run" else _fresh_scores(model, parts, preset, seed)
    return HeadSet(scores.ranking()[:k], reference or parts["task"], text.strip())


def _fresh_scores(model: Any, parts: dict[str, Any], preset: str, seed: int) -> Any:
    """Score heads on the task's calibration split as a `locos-bench run` would."""
    from locos_bench.detectors.registry import detector_names
    from locos_bench.errors import unknown

    if parts["detector"] not in detector_names():
        raise unknown("detector", parts["detector"], detector_names())
    data, cfg = _task_data(model, parts["task"], preset=preset, seed=seed)
    if data.spec.kind != "retrieval":
        raise LocosError(f"task {parts['task']!r} is a {data.spec.kind} task: detectors score heads on a retrieval task")
    from locos_bench.detectors import make_detector, run_detector
    from locos_bench.plan import UnitKey, detector_rng

    # The harness's own scoring call and seeding rule (`plan.detector_rng`); nothing is written.
    key = UnitKey.scores(data.spec.name, parts["detector"], 0)
    try:
        return run_detector(make_detector(key.detector), model, data.calibration, rng=detector_rng(cfg.seed, key))
    except LocosError as exc:
        raise LocosError(f"detector {parts['detector']!r} failed on {parts['task']}: {exc}") from None


def _run_scores(model: Any, *, run: str, detector: str, task: str, k: int) -> Any:
    from locos_bench.models import canonical_name
    from locos_bench.records import RunDir, ScoresUnit

    run_dir = RunDir(run)
    if not run_dir.exists():
        raise LocosError(f"head spec {run}:{detector}@{task}:{k}: {run} is not a run directory (no manifest.json)")
    manifest = run_dir.read_manifest()
    if canonical_name(manifest.model) != canonical_name(model.name):
        raise LocosError(f"run {run} was made on model {manifest.model!r}, not {model.name!r}: its head indices do not apply")
    units = [u for u in run_dir.read_units() if isinstance(u, ScoresUnit) and u.scores is not None and not u.error]
    for unit in units:
        if (unit.detector, unit.task, unit.draw) == (detector, task, 0):
            return _head_scores(unit)
    have = sorted({f"{u.detector}@{u.task}" for u in units}) or ["none"]
    raise LocosError(f"run {run} has no head scores for {detector}@{task}; it has: {', '.join(have)}")


def _head_scores(unit: Any) -> Any:
    import torch

    from locos_bench.detectors.base import HeadScores

    return HeadScores(scores=torch.tensor(unit.scores, dtype=torch.float64), detector=unit.detector)


def _task_data(model: Any, task: str, *, preset: str, seed: int) -> tuple[Any, Any]:
    """The harness's splits of `task` for `preset` and `seed`."""
    from locos_bench.config import RunConfig
    from locos_bench.splits import build_task_data
    from locos_bench.tasks import load_task

    spec = load_task(task)
    cfg = RunConfig(model=model.name, preset=preset, seed=seed, tasks=[task], quiet=True).resolved()
    return build_task_data(spec, cfg, model), cfg


def ablation_hooks(model: Any, head_set: HeadSet, ablation: str = "mean", *, positionwise: bool = False,
                   preset: str = "default", seed: int = 0) -> list:
    """Forward hooks intervening on `head_set` (mean ablation over its task's reference split)."""
    from locos_bench.ablation import AblationSpec, HeadAblation, reference_means
    from locos_bench.tasks.tokenize import tokenize_example

    spec = AblationSpec.parse(ablation, positionwise=positionwise)
    if not head_set.heads:
        return []
    means = None
    if spec.needs_reference:
        if head_set.task is None:
            raise LocosError(
                f"heads={head_set.source} with mean ablation needs reference=TASK (the task whose "
                "reference split gives the mean activations), or ablation=zero"
            )
        data, _ = _task_data(model, head_set.task, preset=preset, seed=seed)
        ids = [tokenize_example(ex, model.tokenizer).input_ids for ex in data.reference]
        means = reference_means(model, ids, positionwise=spec.positionwise)
    return HeadAblation(list(head_set.heads), spec, means).hooks()


# ---------------------------------------------------------------------------------------
# The lm-eval model


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on")


@register_model("locos")
class LocosLM(TemplateLM):
    """lm-eval model `locos`: a locos-bench model with a head set ablated.

    Args:
        model: Model alias, HF id or local HF directory (`models.load_model`).
        heads: `DETECTOR@TASK:K`, `L3H1;L7H2`, `RUN_DIR:DETECTOR@TASK:K`, or none.
        ablation: `mean` (default), `zero` or `scale:ALPHA`.
        positionwise: Mean ablation per position.
        reference: Task whose reference split gives the means (default: the head set's task).
        preset, seed: The run configuration whose splits (and detector seeding) to use.
        device, dtype, batch_size, max_length: As in lm-eval's `hf` backend. A CUDA device
            without a GPU falls back to the CPU with a warning, as `hf` does.
        loaded, hooks: A `LoadedModel` and its hooks, to evaluate without reloading
            (the harness's `--lm-eval-tasks`); then `model`/`heads` only label the results.
    """

    def __init__(self, model: str = "gemma3", heads: str = "", ablation: str = "mean",
                 positionwise: Any = False, reference: str | None = None, preset: str = "default",
                 seed: Any = 0, device: str | None = None, dtype: str = "float32",
                 batch_size: Any = 4, max_batch_size: Any = None, max_length: Any = None,
                 loaded: Any = None, hooks: list | None = None, **unknown_args: Any) -> None:
        super().__init__()
        check_lm_eval_version()
        if unknown_args:
            raise LocosError(
                f"unknown model_args for locos: {', '.join(sorted(unknown_args))}; known: model, heads, "
                "ablation, positionwise, reference, preset, seed, device, dtype, batch_size, max_length"
            )
        if str(batch_size).startswith("auto"):
            raise LocosError("batch_size=auto is not supported by the locos model; give a number")
        try:
            self._batch_size = int(batch_size or 4)
            seed = int(seed)
        except ValueError:
            raise LocosError(f"batch_size and seed must be whole numbers (got {batch_size!r}, {seed!r})") from None
        if loaded is None:
            from locos_bench.models import load_model

            loaded = load_model(str(model), device=_device(device), dtype=str(dtype))
            head_set = resolve_heads(str(heads), loaded, preset=preset, seed=seed, reference=reference)
            hooks = ablation_hooks(loaded, head_set, str(ablation), positionwise=_flag(positionwise),
                                   preset=preset, seed=seed)
            self.head_set = head_set
        else:
            self.head_set = HeadSet([], reference, str(heads) or "given hooks")
        self.loaded = loaded
        self.hooks = list(hooks or [])
        self.tokenizer = loaded.tokenizer
        self._device = loaded.device
        self._max_length = int(max_length) if max_length else None

    @classmethod
    def from_loaded(cls, loaded: Any, hooks: list, *, label: str = "", batch_size: int = 4) -> LocosLM:
        """Wrap an already loaded model and its ablation hooks (no reload, no re-scoring)."""
        return cls(model=loaded.name, heads=label, loaded=loaded, hooks=hooks, batch_size=batch_size)

    # -- what TemplateLM needs -------------------------------------------------------------

    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eos_token_id

    @property
    def prefix_token_id(self) -> int:
        bos = self.tokenizer.bos_token_id
        return bos if bos is not None else self.tokenizer.eos_token_id

    @property
    def max_length(self) -> int:
        from lm_eval.models.utils import resolve_max_length

        if self._max_length:
            return self._max_length
        return resolve_max_length(self.loaded.bridge.original_model.config, self.tokenizer)

    @property
    def max_gen_toks(self) -> int:
        return 256

    @property
    def tokenizer_name(self) -> str:
        return self.tokenizer.name_or_path.replace("/", "__")

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs: Any) -> list[int]:
        """Like `hf`: the tokenizer's own BOS rule, unless the text already starts with BOS."""
        options = {} if add_special_tokens is None else {"add_special_tokens": add_special_tokens}
        bos = self.tokenizer.bos_token
        if add_special_tokens is None and bos and string.startswith(bos):
            options = {"add_special_tokens": False}
        return list(self.tokenizer(string, **options)["input_ids"])

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return self.tokenizer.apply_chat_template(
            chat_history, tokenize=False, add_generation_prompt=add_generation_prompt,
            continue_final_message=not add_generation_prompt,
        )

    # -- the three request types -----------------------------------------------------------

    def _loglikelihood_tokens(self, requests: list, disable_tqdm: bool = False, **kwargs: Any) -> list[tuple[float, bool]]:
        """Sum of continuation log-probs and whether greedy decoding gives the continuation.

        Contexts longer than `max_length` are cut from the left, as `hf` does."""
        from locos_bench.evaluate import continuation_logprobs

        sequences = []
        for _, context, continuation in requests:
            if not continuation:
                raise LocosError("lm-eval asked for the log-likelihood of an empty continuation")
            tokens = (list(context) + list(continuation))[-self.max_length:]
            sequences.append((tokens, min(len(continuation), len(tokens) - 1)))
        scored = continuation_logprobs(self.loaded, sequences, hooks=self.hooks, batch_size=self._batch_size)
        out = []
        for (key, _, _), (logprobs, greedy) in zip(requests, scored):
            answer = (float(sum(logprobs)), bool(all(greedy)))
            if key is not None:
                self.cache_hook.add_partial("loglikelihood", key, answer)
            out.append(answer)
        return out

    def loglikelihood_rolling(self, requests: list, disable_tqdm: bool = False) -> list[float]:
        """Whole-text log-likelihood in disjoint windows of `max_length` (lm-eval's rolling rule)."""
        from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

        windows, owner = [], []
        for index, (string,) in enumerate(req.args for req in requests):
            for window in get_rolling_token_windows(
                token_list=self.tok_encode(string), prefix_token=self.prefix_token_id,
                max_seq_len=self.max_length, context_len=1,
            ):
                context, continuation = make_disjoint_window(window)
                windows.append((None, context, continuation))
                owner.append(index)
        totals = [0.0] * len(requests)
        for index, (logprob, _) in zip(owner, self._loglikelihood_tokens(windows)):
            totals[index] += logprob
        for req, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", req.args, total)
        return totals

    def generate_until(self, requests: list, disable_tqdm: bool = False) -> list[str]:
        """Greedy, KV-cached generation with the ablation active, stopped at `until`."""
        from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs, postprocess_generated_text

        from locos_bench.evaluate import generate_from_ids

        eos = self.tokenizer.decode([self.eot_token_id], skip_special_tokens=False) if self.eot_token_id is not None else None
        groups: dict[str, list[int]] = {}
        for index, req in enumerate(requests):
            groups.setdefault(repr(sorted(req.args[1].items(), key=str)), []).append(index)
        out = [""] * len(requests)
        for indices in groups.values():
            gen_kwargs = requests[indices[0]].args[1]
            kwargs = normalize_gen_kwargs(gen_kwargs, self.max_gen_toks)
            if kwargs.get("do_sample") or float(kwargs.get("temperature") or 0.0) > 0.0:
                raise LocosError(f"the locos model generates greedily; this task asks for sampling ({gen_kwargs})")
            until = handle_stop_sequences(kwargs.pop("until", None), eos=eos)
            max_gen = int(kwargs.pop("max_gen_toks"))
            room = self.max_length - max_gen
            if room < 1:
                raise LocosError(f"max_gen_toks={max_gen} leaves no room for a prompt in max_length={self.max_length}")
            prompts = [self.tok_encode(requests[i].args[0])[-room:] for i in indices]
            texts = generate_from_ids(self.loaded, prompts, max_new_tokens=max_gen, hooks=self.hooks,
                                      batch_size=self._batch_size, until=until)
            for i, text in zip(indices, texts):
                out[i] = postprocess_generated_text(text, until, None)
                self.cache_hook.add_partial("generate_until", requests[i].args, out[i])
        return out

    def get_model_info(self) -> dict[str, Any]:
        return {"locos_model": self.loaded.name, "heads": [f"L{l}H{h}" for l, h in self.head_set.heads],
                "head_source": self.head_set.source}


def _device(device: str | None) -> str:
    if not device:
        return "cpu"
    device = str(device)
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            warnings.warn(f"device {device} asked for, but no CUDA GPU is available: using cpu", stacklevel=3)
            return "cpu"
    return device


# ---------------------------------------------------------------------------------------
# lm-eval tasks as controls of a benchmark run


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

    from lm_eval.tasks import get_task_dict

    name, manager = _task_manager(task, include_path)
    try:
        loaded = get_task_dict([name], manager)
    except Exception as exc:
        raise _task_error(name, exc, manager) from None
    if name not in loaded or isinstance(loaded[name], dict):
        raise LocosError(f"lm-eval task {name!r} is a group; name its tasks one by one")
    obj = loaded[name]
    docs = list(obj.eval_docs)
    docs = docs[: limit] if limit else docs
    filters = [f.name for f in getattr(obj, "_filters", [])] or ["none"]
    metrics = [m if f == "none" else f"{m}/{f}" for f in filters for m in getattr(obj, "_metric_fn_list", {})]
    digest = hashlib.sha256()
    for doc in docs:
        digest.update(json.dumps(doc, sort_keys=True, default=str, ensure_ascii=False).encode())
    version = (obj.config.metadata or {}).get("version", 0)
    return {"name": name, "version": int(float(version or 0)), "metrics": metrics,
            "n_docs": len(docs), "data_hash": digest.hexdigest()}


@dataclass
class LmEvalControl:
    """An lm-eval task as a control task of a benchmark run, shaped like the harness's
    `TaskData`: `spec.name`/`spec.kind`, `entry`, and `reference` (the retrieval task's
    reference split, since mean ablation needs prompts of the heads' own task)."""

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
    def entry(self) -> Any:
        from locos_bench.records import TaskEntry

        return TaskEntry(name=self.spec.name, version=self.info["version"], kind="control",
                         metrics=self.info["metrics"], splits={"evaluation": list(range(self.info["n_docs"]))},
                         data_hash=self.info["data_hash"])

    def values(self, loaded: Any, hooks: list, *, batch_size: int = 4) -> dict[str, list[float]]:
        return task_values(loaded, hooks, self.task, limit=self.info["n_docs"], batch_size=batch_size,
                           include_path=self.include_path)


def lm_eval_controls(tasks: list[str], source: Any, *, limit: int) -> list[LmEvalControl]:
    """`--lm-eval-tasks` of a run: each task's first `limit` documents, ablated with the heads
    (and the reference split) of the run's first retrieval task `source`."""
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
    own tasks takes seconds)."""
    return _manager((str(Path(include_path).resolve()),) if include_path else ())


@lru_cache(maxsize=8)
def _manager(include: tuple[str, ...]) -> Any:
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=list(include) or None)


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


def _task_error(task: str, exc: Exception, manager: Any = None) -> LocosError:
    text = f"{type(exc).__name__}: {exc}"
    offline = any(word in text for word in ("offline", "Offline", "ConnectionError", "resolve", "Couldn't reach",
                                            "couldn't reach", "Max retries", "Network", "not find", "doesn't exist on the Hub"))
    if offline:
        where = ""
        entry = getattr(manager, "_index", {}).get(task)
        yaml_path = getattr(entry, "yaml_path", None)
        if yaml_path:
            found = re.search(r"^dataset_path:\s*(\S+)", Path(yaml_path).read_text(), re.M)
            where = f" {found[1]!r}" if found else ""
        return LocosError(
            f"lm-eval task {task!r} loads its dataset{where} from the Hugging Face hub, which cannot be "
            "reached from here; point it at local files: copy its YAML with `dataset_path: json` and "
            "`dataset_kwargs: {data_files: {test: PATH.jsonl}}` and pass that YAML file (README, 'lm-eval')"
        )
    return LocosError(f"lm-eval task {task!r} failed: {text.splitlines()[0][:300]}")


def main(argv: list[str]) -> int:
    """Run lm-eval's own CLI with `argv` unchanged, `locos` registered."""
    from lm_eval.__main__ import cli_evaluate

    saved = sys.argv
    sys.argv = ["lm-eval", *argv]
    try:
        cli_evaluate()
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    finally:
        sys.argv = saved
    return 0
