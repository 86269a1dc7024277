"""Evaluation: greedy generation, teacher-forced log-probs and clean prefixes, under any hooks.

The face::

    from locos_bench.evaluation import evaluate_task, generate_answers, gold_logprobs

Modules: `generation`, `logprobs`, `clean_prefix` (start ablated runs at their lowest ablated
layer), `task_eval` (answers plus every metric a task lists); `batch_progress` reports their
batches to a caller. The hooks they run under (mean, zero and scale ablation, streaming heads)
are `locos_bench.interventions`; every forward here binds its token positions
(`interventions.token_positions`) for the hooks to read.
"""

from locos_bench.evaluation._batching import batch_progress
from locos_bench.evaluation.clean_prefix import CleanPrefix, PrefillChain
from locos_bench.evaluation.generation import generate_answers, generate_from_ids, stop_token_ids
from locos_bench.evaluation.logprobs import continuation_logprobs, gold_logprobs, token_logprobs
from locos_bench.evaluation.task_eval import answers_and_logprobs, evaluate_full_sets, evaluate_head_sets, evaluate_task

__all__ = [
    "CleanPrefix",
    "PrefillChain",
    "answers_and_logprobs",
    "batch_progress",
    "continuation_logprobs",
    "evaluate_full_sets",
    "evaluate_head_sets",
    "evaluate_task",
    "generate_answers",
    "generate_from_ids",
    "gold_logprobs",
    "stop_token_ids",
    "token_logprobs",
]
