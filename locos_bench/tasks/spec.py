"""Task specifications (one flat YAML per task) and the examples they produce.

An `Example` is plain text with character spans; tokenisation maps the spans to token
positions once (`locos_bench.tasks.tokenize`). Examples are a pure function of
(task, version, seed, index), so every machine sees the same ones.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Span = tuple[int, int]


class Example(BaseModel):
    """One prompt with its gold answers and where the evidence sits.

    Spans are `[start, end)` character offsets into `prompt`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    task: str
    """Task name that produced the example."""
    index: int
    """Position in the task's deterministic stream of examples."""
    prompt: str
    """The exact text fed to the model (already in the model's prompt format)."""
    answers: list[str]
    """Gold answers, every form the metrics accept; the first is teacher-forced unless
    `target_answer` is set."""
    target_prefix: str = " "
    """Text between the prompt and the answer when teacher forcing (a space after
    `Answer:` for plain completion, empty inside a chat template)."""
    target_answer: str | None = None
    """The answer as a correct greedy reply begins (`In the Blue Mosque` where the accepted answers
    are `Blue Mosque` and `the Blue Mosque`), when that is not `answers[0]`: teacher-forced for
    the gold log-prob and every teacher-forced detector. It must contain an accepted answer;
    the metrics never read it. Chosen per generator from what the models say (`docs/tasks.md`,
    Teacher-forced targets)."""
    needle_spans: list[Span] = Field(default_factory=list)
    """The evidence the answer must be retrieved from (empty for control tasks)."""
    distractor_spans: list[Span] = Field(default_factory=list)
    """Text that looks like evidence but is not (other characters' needles, etc.)."""
    question_span: Span | None = None
    """The question, which detectors must not count as context."""
    context_span: Span | None = None
    """The haystack (filler plus needles and distractors): where off-needle positions live."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """seed, context_length, depth and generator-specific facts."""

    @property
    def item(self) -> str:
        """The underlying item: the source's `metadata["item"]`, else the content (needle texts,
        question and answers), so two examples of one fact share a key and never cross splits."""
        item = self.metadata.get("item")
        if item is not None:
            return str(item)
        question = self.prompt[slice(*self.question_span)] if self.question_span else None
        needles = [self.prompt[a:b] for a, b in self.needle_spans]
        return json.dumps([needles, question, self.answers], ensure_ascii=False)

    @property
    def target(self) -> str:
        """The gold continuation used for teacher forcing: `target_prefix`, then `target_answer`
        or else the first accepted answer."""
        return self.target_prefix + (self.target_answer or self.answers[0])

    @model_validator(mode="after")
    def _check(self) -> Example:
        if not self.answers or not all(isinstance(a, str) and a.strip() for a in self.answers):
            raise ValueError(f"{self.task}[{self.index}]: an example needs a non-empty answer")
        if self.target_answer is not None and not any(
                a.strip().lower() in self.target_answer.lower() for a in self.answers):
            raise ValueError(f"{self.task}[{self.index}]: target_answer {self.target_answer!r} contains none "
                             f"of the answers {self.answers}")
        spans = [*self.needle_spans, *self.distractor_spans]
        spans += [s for s in (self.question_span, self.context_span) if s is not None]
        for start, end in spans:
            if not 0 <= start < end <= len(self.prompt):
                raise ValueError(
                    f"{self.task}[{self.index}]: span [{start}, {end}) lies outside the prompt "
                    f"({len(self.prompt)} characters)"
                )
        return self

    def shifted(self, prompt: str, offset: int, target_prefix: str | None = None) -> Example:
        """The same example embedded in a longer prompt whose original text starts at
        `offset` (used when a chat template wraps the prompt)."""

        def move(span: Span | None) -> Span | None:
            return None if span is None else (span[0] + offset, span[1] + offset)

        return self.model_copy(
            update={
                "prompt": prompt,
                "needle_spans": [move(s) for s in self.needle_spans],
                "distractor_spans": [move(s) for s in self.distractor_spans],
                "question_span": move(self.question_span),
                "context_span": move(self.context_span),
                "target_prefix": self.target_prefix if target_prefix is None else target_prefix,
            }
        )


class SourceSpec(BaseModel):
    """Where examples come from: a built-in generator or a dataset loader."""

    model_config = ConfigDict(extra="forbid")

    generator: str | None = None
    """Name of a built-in generator (`locos_bench.tasks.generators`)."""
    loader: str | None = None
    """Name of a dataset loader (`locos_bench.tasks.loaders`)."""
    args: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for the generator or loader (paths, configs, numbers of characters)."""

    @model_validator(mode="after")
    def _one_source(self) -> SourceSpec:
        if (self.generator is None) == (self.loader is None):
            raise ValueError("source needs exactly one of `generator` or `loader`")
        return self


class SizesSpec(BaseModel):
    """Default numbers of examples per split for a benchmark run."""

    model_config = ConfigDict(extra="forbid")

    calibration: int = 8
    reference: int = 8
    evaluation: int = 24


class CalibrationSpec(BaseModel):
    """How a task's calibration split (the examples detectors score heads on) differs from
    its reference and evaluation examples. The LOCOS authors detect on another grid than they
    evaluate on (three characters per NoLiMa entry at 1,000-5,000 tokens; one character at
    1,000-16,000 for the ablations): `run.splits` draws the calibration examples from this
    stream, on the calibration split's own items."""

    model_config = ConfigDict(extra="forbid")

    context_lengths: list[int] | None = None
    """The calibration grid's context lengths (None: the task's)."""
    depths: list[float] | None = None
    """The calibration grid's depths (None: the task's)."""
    args: dict[str, Any] = Field(default_factory=dict)
    """Source arguments that replace the task's for calibration examples."""
    size: int | None = Field(default=None, ge=0)
    """Calibration examples whatever the run's `--n-calib` (0: a control task, which no
    detector scores, spends none of its rows on calibration); None: the run's."""

    @field_validator("depths")
    @classmethod
    def _depths_in_range(cls, value: list[float] | None) -> list[float] | None:
        return None if value is None else _depths(value)

    @field_validator("context_lengths")
    @classmethod
    def _positive_lengths(cls, value: list[int] | None) -> list[int] | None:
        return None if value is None else _lengths(value)


class TaskSpec(BaseModel):
    """One task, loaded from `tasks/<name>.yaml` and validated (unknown keys rejected)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    """Unique task name (the YAML file's stem)."""
    version: int
    """Bumped whenever the examples change; baselines of another version are stale."""
    kind: Literal["retrieval", "control"]
    """Retrieval tasks should collapse under retrieval-head ablation; controls should not."""
    description: str = ""
    source: SourceSpec
    prompt_format: Literal["auto", "completion", "chat"] = "auto"
    """`completion` (`<context>\\n\\nQuestion: ...\\nAnswer:`), `chat` (the tokenizer's chat
    template) or `auto` (chat for instruct models, completion otherwise)."""
    metrics: list[str] = Field(default_factory=lambda: ["rouge_l", "contains"])
    """Metric names from `locos_bench.tasks.metrics`; the first is the task's headline metric."""
    max_new_tokens: int = 8
    """Generation budget for the answer."""
    sizes: SizesSpec = Field(default_factory=SizesSpec)
    context_lengths: list[int] = Field(default_factory=lambda: [256])
    """Target context lengths in tokens (approximate; the generator fills to them)."""
    depths: list[float] = Field(default_factory=lambda: [0.5])
    """Needle depths as fractions of the context (0 = start, 1 = end)."""
    seed: int = 0
    chance: float | None = None
    """Accuracy of guessing (for example 1/4 with four candidate names), when defined."""
    harder: str | None = None
    """A harder variant of this retrieval task (longer context, more distractors), where
    accuracy has room to rise: steering runs (`--steer-alphas`) also evaluate it with this
    task's heads."""
    calibration: CalibrationSpec | None = None
    """Where the calibration (detection) examples differ from the rest (their own grid and
    source arguments, or their number); None: the same stream for every split."""

    def for_calibration(self) -> TaskSpec:
        """The task as its calibration examples are drawn: the calibration grid and source
        arguments in place of the task's (itself when `calibration` changes neither)."""
        cal = self.calibration
        if cal is None or (cal.context_lengths is None and cal.depths is None and not cal.args):
            return self
        source = self.source.model_copy(update={"args": {**self.source.args, **cal.args}})
        return self.model_copy(update={
            "source": source,
            "context_lengths": cal.context_lengths or self.context_lengths,
            "depths": cal.depths or self.depths,
        })

    @field_validator("depths")
    @classmethod
    def _depths_in_range(cls, value: list[float]) -> list[float]:
        return _depths(value)

    @field_validator("context_lengths")
    @classmethod
    def _positive_lengths(cls, value: list[int]) -> list[int]:
        return _lengths(value)


def _depths(value: list[float]) -> list[float]:
    if not value or any(not 0.0 <= d <= 1.0 for d in value):
        raise ValueError("depths must be a non-empty list of fractions in [0, 1]")
    return value


def _lengths(value: list[int]) -> list[int]:
    if not value or any(n <= 0 for n in value):
        raise ValueError("context_lengths must be a non-empty list of positive integers")
    return value
