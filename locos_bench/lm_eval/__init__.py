"""lm-evaluation-harness integration: any lm-eval task with a head set ablated.

`import locos_bench.lm_eval` registers the lm-eval model `locos` when a supported lm-eval is
installed (lm-eval 0.4.13 fills its model registry only when `@register_model` runs on import;
`pyproject.toml` also declares the `lm_eval.models` entry point for versions that read it)::

    lm_eval.simple_evaluate(model="locos", model_args="model=gemma3,heads=locos@niah-literal:16",
                            tasks=["arc_easy"])

Modules: `headsets` (the `heads=` grammar; imports without lm-eval), `lm` (the `locos` model
and the version check), `controls` (lm-eval tasks as control tasks of a run).
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.lm_eval.headsets import HeadSet, ablation_hooks, parse_heads, resolve_heads

_NEEDS_LM_EVAL = {
    "LocosLM": "lm", "SUPPORTED_LM_EVAL": "lm", "check_lm_eval_version": "lm",
    "LmEvalControl": "controls", "describe_task": "controls", "lm_eval_controls": "controls",
    "per_example": "controls", "task_manager": "controls", "task_values": "controls",
}

if importlib.util.find_spec("lm_eval") is not None:
    try:
        from locos_bench.lm_eval import lm as _lm  # noqa: F401  (registers `locos`)
    except LocosError:
        pass  # an unsupported lm-eval: using `LocosLM` raises the version error


def __getattr__(name: str) -> Any:
    module = _NEEDS_LM_EVAL.get(name)
    if module is None:
        raise AttributeError(f"module 'locos_bench.lm_eval' has no attribute {name!r}")
    return getattr(importlib.import_module(f"locos_bench.lm_eval.{module}"), name)


__all__ = ["HeadSet", "ablation_hooks", "parse_heads", "resolve_heads", *sorted(_NEEDS_LM_EVAL)]
