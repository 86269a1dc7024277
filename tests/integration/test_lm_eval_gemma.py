"""`locos` against lm-eval's own `hf` backend on Gemma 3 270M, offline.

The `hf` backend loads the HF directory this project dequantises the GGUF into (safetensors +
tokenizer under the locos-bench cache), `locos` wraps the same weights in the
TransformerBridge; both evaluate the local-file tasks `capitals_gen` (several greedy tokens:
KV-cached decoding) and `capitals_mc` from tests/fixtures/lm_eval.
"""

from __future__ import annotations

import pytest

# `offline` (autouse) and `manager` are fixtures: importing them makes them this module's too.
from tests.integration.test_lm_eval import _docs, _evaluate, manager, offline  # noqa: F401

pytestmark = pytest.mark.slow

TASKS = ["capitals_gen", "capitals_mc"]
LL_TOL = 1e-4
"""Largest |log-likelihood difference| per choice accepted (float32 through a 262k-entry
unembedding; TransformerBridge vs HF forward code)."""


@pytest.fixture(scope="module")
def le():
    import locos_bench.lm_eval as module

    return module


@pytest.fixture(scope="module")
def results(gemma3, le, manager):
    from locos_bench.models import resolve_spec
    from locos_bench.models._gguf import _cache_dir

    directory = _cache_dir(resolve_spec("gemma3"))
    assert (directory / "complete.json").exists()  # written by the gemma3 fixture's load
    hf = _evaluate("hf", manager, tasks=TASKS, model_args=f"pretrained={directory},dtype=float32")
    ours = _evaluate(le.LocosLM.from_loaded(gemma3, []), manager, tasks=TASKS)
    return hf, ours


def test_gemma3_locos_equals_hf(results):
    hf, ours = results
    gens = [(a["resps"], b["resps"]) for a, b in zip(_docs(hf, "capitals_gen"), _docs(ours, "capitals_gen"))]
    assert [b for _, b in gens] == [a for a, _ in gens]
    worst = 0.0
    for a, b in zip(_docs(hf, "capitals_mc"), _docs(ours, "capitals_mc")):
        for (ll_a, _), (ll_b, _) in zip((r[0] for r in a["resps"]), (r[0] for r in b["resps"])):
            worst = max(worst, abs(ll_a - ll_b))
        assert a["acc"] == b["acc"]
    for task, metric in [("capitals_gen", "exact_match,first-word"), ("capitals_mc", "acc,none")]:
        print(f"gemma3 {task} {metric}: hf {hf['results'][task][metric]!r} locos {ours['results'][task][metric]!r}")
    print(f"gemma3 largest per-choice log-likelihood difference: {worst:.2e}; generations: {[b for _, b in gens]}")
    assert worst < LL_TOL
