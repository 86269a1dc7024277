"""Turn a `TaskSpec` into examples in a model's prompt format.

An example is a pure function of (task name, version, seed, index): the generator's
`random.Random` is seeded from a SHA-256 of those four values, so every machine sees the same
examples. Generators and loaders return the *raw* form `<context>\\n\\nQuestion: <q>`; the
prompt format is applied here:

* `completion`: `<context>\\n\\nQuestion: <q>\\nAnswer:`, target prefix `" "`;
* `chat`: the raw text plus an instruction line, wrapped in the tokenizer's chat template
  as one user turn, target prefix `""`;
* `auto`: `chat` when the model is an instruct model with a template, else `completion`.

An example that is not in the raw form (its question is not the end of the prompt after
`\n\nQuestion: `, as for `planted-kv`'s toy vocabulary) or that sets
`metadata["formatted"] = True` is already final and passes through untouched.

A *user turn* (`metadata["user_turn"] = True`, as NoLiMa's task template builds it) carries its
own instruction and an optional `metadata["system_prompt"]`: completion prepends the system
prompt and appends `\nAnswer:`; chat sends a system and a user message. Worked turns before it
(`metadata["few_shot"]`, `[question, answer]` pairs: the LOCOS authors' parametric prompt) are
user and assistant messages in chat, `Question: ...\nAnswer: ...` lines in completion (the
question then follows as `Question: <q>`).
"""

from __future__ import annotations

import hashlib
import random
import warnings
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.tasks.spec import Example, TaskSpec

COMPLETION_SUFFIX = "\nAnswer:"
CHAT_INSTRUCTION = "\nGive a short answer."
"""Appended to the user turn in chat format (SmolLM2-135M-Instruct answered best with it;
asking for "only the answer (a name, a word or a number)" made it answer "The football is a
name")."""


def example_rng(spec: TaskSpec, index: int) -> random.Random:
    """The generator's random stream for example `index` of `spec`."""
    key = f"{spec.name}\x1f{spec.version}\x1f{spec.seed}\x1f{index}".encode()
    return random.Random(int.from_bytes(hashlib.sha256(key).digest()[:8], "big"))


def resolve_format(spec: TaskSpec, model: Any = None) -> str:
    """`completion` or `chat` for this task on this model."""
    if spec.prompt_format == "auto":
        return "chat" if model is not None and getattr(model, "uses_chat_template", False) else "completion"
    if spec.prompt_format == "chat" and _tokenizer(model) is None:
        raise LocosError(
            f"task {spec.name!r} uses prompt_format 'chat', which needs a model's tokenizer "
            f"(pass --model)"
        )
    return spec.prompt_format


def _tokenizer(model: Any) -> Any:
    if model is None:
        return None
    return getattr(model, "tokenizer", model)


def raw_example(spec: TaskSpec, index: int) -> Example:
    """The generator's (or loader's) raw example, before the prompt format."""
    where = f"{spec.name}[{index}]"
    rng = example_rng(spec, index)
    try:
        if spec.source.generator is not None:
            from locos_bench.tasks.generators import get_generator

            fn = get_generator(spec.source.generator)
        else:
            from locos_bench.tasks.loaders import get_loader

            fn = get_loader(spec.source.loader)
        example = fn(spec, index, rng, **spec.source.args)
    except LocosError:
        raise
    except TypeError as exc:
        source = spec.source.generator or spec.source.loader
        raise LocosError(f"{where}: bad source.args for {source}: {exc}") from None
    except ValueError as exc:  # pydantic validation of the Example, bad arguments
        raise LocosError(f"{where}: {exc}") from None
    if not isinstance(example, Example):
        raise LocosError(f"{where}: the source returned {type(example).__name__}, not an Example")
    return example


def example_item(example: Example) -> str:
    """The underlying item of `example` (`Example.item`)."""
    return example.item


def is_raw(example: Example) -> bool:
    """Whether `example` is in the raw form `<context>\\n\\nQuestion: <q>`."""
    from locos_bench.tasks.text import QUESTION_PREFIX

    span = example.question_span
    return (
        span is not None
        and span[1] == len(example.prompt)
        and example.prompt[: span[0]].endswith(QUESTION_PREFIX)
    )


def format_example(example: Example, fmt: str, model: Any = None) -> Example:
    """Apply the prompt format `fmt` (`completion` or `chat`) to a raw example (or a user
    turn)."""
    user_turn = bool(example.metadata.get("user_turn"))
    if example.metadata.get("formatted") or not (user_turn or is_raw(example)):
        return example
    meta = {**example.metadata, "prompt_format": fmt}
    system = str(example.metadata.get("system_prompt") or "") if user_turn else ""
    shots = [(str(u), str(a)) for u, a in example.metadata.get("few_shot") or []] if user_turn else []
    if fmt == "completion":
        head = system + "\n\n" if system else ""
        if shots:  # worked turns as question/answer lines, then the question the same way
            head += "".join(f"Question: {u}{COMPLETION_SUFFIX} {a}\n\n" for u, a in shots) + "Question: "
        shifted = example.shifted(head + example.prompt + COMPLETION_SUFFIX, len(head), target_prefix=" ")
        return shifted.model_copy(update={"metadata": meta})
    tok = _tokenizer(model)
    content = example.prompt if user_turn else example.prompt + CHAT_INSTRUCTION
    messages = [{"role": "system", "content": system}] if system else []
    for u, a in shots:
        messages += [{"role": "user", "content": u}, {"role": "assistant", "content": a}]
    templated = tok.apply_chat_template(
        [*messages, {"role": "user", "content": content}], tokenize=False, add_generation_prompt=True,
        **getattr(model, "chat_template_kwargs", {}),  # Qwen3: enable_thinking=False
    )
    # The tokenizer adds BOS itself: drop a BOS the template wrote, or it would appear twice.
    bos = getattr(tok, "bos_token", None)
    if bos and templated.startswith(bos):
        ids = tok("x")["input_ids"]
        if ids and ids[0] == tok.bos_token_id:
            templated = templated[len(bos):]
    offset = templated.rfind(content)  # the last user turn (a worked turn may repeat its text)
    if offset < 0:
        raise LocosError(f"{example.task}[{example.index}]: the chat template rewrote the prompt")
    shifted = example.shifted(templated, offset, target_prefix="")
    return shifted.model_copy(update={"metadata": meta})


def make_example(spec: TaskSpec, index: int, *, model: Any = None) -> Example:
    """Example `index` of `spec` in the prompt format for `model`.

    Raises:
        LocosError: naming the task and index (a row without an answer, a needle that
            cannot be placed, bad generator arguments, a context the model cannot hold).
    """
    fmt = resolve_format(spec, model)
    example = format_example(raw_example(spec, index), fmt, model)
    n_ctx = _model_context(model)
    length = example.metadata.get("context_length")
    if n_ctx is not None and isinstance(length, int) and length > n_ctx:
        raise LocosError(
            f"{spec.name}[{index}]: context length {length} exceeds the model's "
            f"context window of {n_ctx} tokens"
        )
    return example


def _model_context(model: Any) -> int | None:
    cfg = getattr(getattr(model, "bridge", None), "cfg", None)
    n_ctx = getattr(cfg, "n_ctx", None)
    return int(n_ctx) if isinstance(n_ctx, int) and n_ctx > 0 else None


def make_examples(
    spec: TaskSpec, n: int, *, start: int = 0, model: Any = None, skip_errors: bool = False,
    skip_bad_rows: bool = False,
) -> list[Example]:
    """Examples `start .. start+n-1` of `spec`, formatted for `model`.

    Args:
        spec: The task.
        n: How many examples.
        start: Index of the first (disjoint ranges give disjoint example sets).
        model: A `LoadedModel` (or a tokenizer) deciding the prompt format; `None` means
            plain completion.
        skip_errors: Warn about and skip an example that cannot be made (a needle that cannot
            be placed, a dataset row without an answer) instead of raising; the rest survive.
            Where the task's data ends, the list ends, without a warning.
        skip_bad_rows: Likewise for a bad row of a user's data file (`reading.BadRow`), which
            fails even with `skip_errors`: a file is fixed, not silently thinned.
    """
    examples, skipped, _ = read_examples(spec, n, start=start, model=model, skip_errors=skip_errors,
                                         skip_bad_rows=skip_bad_rows)
    for error in skipped:
        warnings.warn(f"skipped: {error}", stacklevel=2)
    return examples


def read_examples(spec: TaskSpec, n: int, *, start: int = 0, model: Any = None, skip_errors: bool = False,
                  skip_bad_rows: bool = False) -> tuple[list[Example], list[LocosError], int | None]:
    """`make_examples`, told apart: (the examples, the error of each skipped one, the index
    where the task's data ended, None if not before `start + n`), for a caller that reports
    them itself."""
    from locos_bench.tasks.reading import BadRow, EndOfData

    if n < 0 or start < 0:
        raise LocosError("n and start must be non-negative")
    out: list[Example] = []
    skipped: list[LocosError] = []
    for index in range(start, start + n):
        try:
            out.append(make_example(spec, index, model=model))
        except EndOfData:
            if not skip_errors:
                raise
            return out, skipped, index
        except BadRow as exc:
            if not skip_bad_rows:
                raise
            skipped.append(exc)
        except LocosError as exc:
            if not skip_errors:
                raise
            skipped.append(exc)
    return out, skipped, None
