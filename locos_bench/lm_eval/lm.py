"""The lm-eval model `locos`: any lm-eval task evaluated with a head set ablated.

Importing this module checks the installed lm-eval version and registers `locos` (lm-eval
0.4.13 fills its model registry only when `@register_model` runs on import; `pyproject.toml`
also declares the `lm_eval.models` entry point for versions that read it).

`LocosLM` is built on the project's own pieces: `models.load_model` for the model, the
harness's splits and detectors for head sets (`headsets`), `interventions.HeadAblation`
for the hooks (active in every forward pass, prefill and KV-cached decoding alike),
`interventions.only_full` for `ablation=streaming` (entered around every forward the
same way) and `evaluation` for batched scoring and greedy generation. Tokenisation follows lm-eval's `hf`
backend (`TemplateLM`), so unablated results match `--model hf` on the same weights (tested).
"""

from __future__ import annotations

import sys
import warnings
from contextlib import ExitStack, nullcontext
from typing import Any

from locos_bench._compat.lm_eval import VERIFIED, check, check_subclass_hooks
from locos_bench.errors import LocosError
from locos_bench.names import head_name

SUPPORTED_LM_EVAL = VERIFIED
"""lm-eval versions this module is tested against (the CI installs 0.4.13; `_compat.lm_eval`)."""

check_lm_eval_version = check
"""The installed lm-eval version, or a `LocosError` naming the supported range."""

check_lm_eval_version()
check_subclass_hooks()

import lm_eval.models  # noqa: E402, F401  (fills the lazy registry first: `get_model` only does so when it is empty)
from lm_eval.api.model import TemplateLM  # noqa: E402
from lm_eval.api.registry import register_model  # noqa: E402

from locos_bench.interventions import SINK_RULES  # noqa: E402
from locos_bench.lm_eval.headsets import (  # noqa: E402
    STREAMING,
    HeadSet,
    ablation_hooks,
    resolve_heads,
    streaming_settings,
)


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
        ablation: `mean` (default), `zero`, `scale:ALPHA` (ALPHA > 0: the heads' outputs
            scaled, steering), `mean-q`, `zero-q` (the heads' queries replaced, before QK-norm
            and RoPE: `interventions.query`) or `streaming`: the head set's heads are the only full heads and
            every other head streams (its row's first `kv_sink` real tokens and last
            `kv_window` tokens); `heads=none` then streams every head (the floor).
        kv_sink, kv_window: The streaming heads' sinks and window (`streaming` only; default
            4 and 64, as `locos-bench run --kv-sink --kv-window`).
        positionwise: Mean ablation (`mean`, `mean-q`) per position.
        sink: `mean` or `keep`: what mean ablation of `z` writes at a BOS sink (position 0), as
            `locos-bench run --sink`; default the run's rule for `RUN_DIR:` heads, else `mean`
            (a query ablation takes none).
        reference: Task whose reference split gives the means (default: the head set's task).
        preset, seed: The run configuration whose splits (and detector seeding) to use.
        device, dtype, batch_size, max_length: As in lm-eval's `hf` backend. A CUDA device
            without a GPU falls back to the CPU with a warning, as `hf` does.
        loaded, hooks: A `LoadedModel` and its hooks, to evaluate without reloading
            (the harness's `--lm-eval-tasks`); then `model`/`heads` only label the results.
    """

    def __init__(self, model: str = "gemma3", heads: str = "", ablation: str = "mean",
                 positionwise: Any = False, sink: str | None = None, reference: str | None = None,
                 kv_sink: Any = None, kv_window: Any = None,
                 preset: str = "default", seed: Any = 0, device: str | None = None, dtype: str = "float32",
                 batch_size: Any = 4, max_batch_size: Any = None, max_length: Any = None,
                 loaded: Any = None, hooks: list | None = None, **unknown_args: Any) -> None:
        super().__init__()
        check_lm_eval_version()
        if unknown_args:
            raise LocosError(
                f"unknown model_args for locos: {', '.join(sorted(unknown_args))}; known: model, heads, "
                "ablation, positionwise, sink, reference, kv_sink, kv_window, preset, seed, device, dtype, "
                "batch_size, max_length"
            )
        ablation = str(ablation).strip()
        stream = streaming_settings(ablation, kv_sink, kv_window)
        if sink is not None and str(sink) not in SINK_RULES:
            raise LocosError(f"sink={sink!r} for locos: choose {' or '.join(SINK_RULES)}")
        if stream is None:
            _check_ablation(ablation, _flag(positionwise), None if sink is None else str(sink))
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
            if stream is None:
                hooks = ablation_hooks(loaded, head_set, ablation, positionwise=_flag(positionwise),
                                       sink=None if sink is None else str(sink), preset=preset, seed=seed)
            self.head_set = head_set
            if str(heads).strip():  # a scored or run spec resolves at load time: say to what
                names = ", ".join(head_name(h) for h in head_set.heads) or "none"
                print(f"locos: heads={heads} -> {names} ({ablation})", file=sys.stderr, flush=True)
        elif stream is not None:  # the given hooks stay; the head set is the full heads
            self.head_set = resolve_heads(str(heads), loaded, preset=preset, seed=seed, reference=reference)
        else:
            self.head_set = HeadSet([], reference, str(heads) or "given hooks")
        self.ablation = ablation
        self.streaming = stream
        if stream is not None:
            _check_streaming(loaded, self.head_set.heads, *stream)
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
        from locos_bench.evaluation import continuation_logprobs

        sequences = []
        for _, context, continuation in requests:
            if not continuation:
                raise LocosError("lm-eval asked for the log-likelihood of an empty continuation")
            tokens = (list(context) + list(continuation))[-self.max_length:]
            sequences.append((tokens, min(len(continuation), len(tokens) - 1)))
        with self._attention():
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

        from locos_bench.evaluation import generate_from_ids

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
            with self._attention():
                texts = generate_from_ids(self.loaded, prompts, max_new_tokens=max_gen, hooks=self.hooks,
                                          batch_size=self._batch_size, until=until)
            for i, text in zip(indices, texts):
                out[i] = postprocess_generated_text(text, until, None)
                self.cache_hook.add_partial("generate_until", requests[i].args, out[i])
        return out

    def _attention(self) -> Any:
        """The attention every forward runs under: `only_full(head set)` for
        `ablation=streaming`, else unchanged."""
        if self.streaming is None:
            return nullcontext()
        return _only_full(self.loaded, self.head_set.heads, *self.streaming)

    def get_model_info(self) -> dict[str, Any]:
        info = {"locos_model": self.loaded.name, "heads": [head_name(h) for h in self.head_set.heads],
                "head_source": self.head_set.source, "ablation": self.ablation}
        if self.streaming is not None:
            info["kv_sink"], info["kv_window"] = self.streaming
        return info


def _check_ablation(ablation: str, positionwise: bool = False, sink: str | None = None) -> None:
    """Refuse an unknown ablation, or an option it does not take, before the model loads (the
    lm-eval names include streaming)."""
    from locos_bench.interventions import AblationSpec
    from locos_bench.interventions.ablation import ABLATIONS

    try:
        AblationSpec.parse(ablation, positionwise=positionwise, sink=sink)
    except LocosError as exc:
        raise LocosError(str(exc).replace(ABLATIONS, ABLATIONS.replace(" or ", ", ") + f" or {STREAMING}")) from None


def _check_streaming(loaded: Any, full: list, sink: int, window: int) -> None:
    """Refuse a window past the model's context, and a model that cannot stream (eager
    attention), before any request runs."""
    from locos_bench.models.heads import context_length

    longest = context_length(loaded)
    if longest is not None and window > longest:
        raise LocosError(f"kv_window={window} is longer than {loaded.name}'s context of {longest} tokens")
    _only_full(loaded, full, sink, window).close()


def _only_full(loaded: Any, full: list, sink: int, window: int) -> ExitStack:
    """`only_full` entered (its refusal named as `ablation=streaming`'s); close it to leave."""
    from locos_bench.interventions import only_full

    stack = ExitStack()
    try:
        stack.enter_context(only_full(loaded.bridge, full, sink=sink, window=window))
    except LocosError as exc:
        raise LocosError(f"ablation={STREAMING}: {exc}") from None
    return stack


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
