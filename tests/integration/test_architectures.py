"""Every architecture the README names, in miniature, through the path a hub checkpoint takes.

Each is a tiny randomly initialised instance built from transformers' own config class with
the shipped checkpoint's structure scaled down (`locos_bench.models.miniature`), saved with
`save_pretrained` plus an offline tokenizer, and loaded with `load_model(directory)`. The
per-head identities, cached generation and ablation mechanics are the very tests written
for the embedded models, imported here and run on each architecture through the fixtures
they ask for (`real_model`, `planted`); contexts are longer than the sliding windows.
"""

from __future__ import annotations

import pytest

from locos_bench.models import heads, load_model
from locos_bench.models.miniature import ARCHITECTURES, TINY, miniature
from locos_bench.run import RunDir
from tests.integration.test_attention import (  # noqa: F401
    count_lean,
    test_a_pattern_hook_gets_the_explicit_path,
    test_lean_attention_equals_the_explicit_path,
    test_lean_cached_generation_equals_the_explicit_path,
)
from tests.integration.test_generation import test_cached_generation_equals_uncached  # noqa: F401
from tests.integration.test_head_identities import (  # noqa: F401
    test_direct_logit_attribution_sums_to_logits,
    test_recomputed_attention_rows_equal_hook_pattern,
    test_summed_head_writes_equal_attention_block_output,
)
from tests.unit.test_ablation import (  # noqa: F401
    test_ablation_reaches_the_block_output,
    test_mean_ablation_replaces_only_chosen_heads,
    test_mean_excludes_bos_and_is_the_average,
    test_positionwise_means_follow_positions_during_generation,
    test_zero_and_scale,
)

pytestmark = pytest.mark.slow


MOE = ["qwen3-moe", "olmoe", "mixtral", "gpt-oss"]
"""The mixtures of experts: the same tests, in their own file (`test_architectures_moe.py`), so
pytest-xdist can hand them to another worker."""
EXPLICIT_ONLY = {"gpt-oss"}
"""Architectures the lean attention path refuses (`tests/integration/test_attention.py`)."""
ARCHS = [a for a in ARCHITECTURES if a not in MOE]
"""The architectures this file's tests run on."""


@pytest.fixture(scope="module")
def architecture_dirs(tmp_path_factory, request):
    """Each miniature of the module's `ARCHS` saved once as a local HF directory."""
    root = tmp_path_factory.mktemp("architectures")
    return {arch: miniature(arch, root / arch) for arch in request.module.ARCHS}


@pytest.fixture(scope="module")
def architecture_models(architecture_dirs):
    return {arch: load_model(str(path)) for arch, path in architecture_dirs.items()}


def pytest_generate_tests(metafunc):
    if "arch" in metafunc.fixturenames:
        metafunc.parametrize("arch", metafunc.module.ARCHS)


@pytest.fixture
def real_model(architecture_models, arch):
    """Overrides conftest's embedded models, so the imported identity tests run on each architecture."""
    return architecture_models[arch]


@pytest.fixture
def planted(real_model):
    """What the imported ablation tests call their model."""
    return real_model


@pytest.fixture
def prompts(planted):
    """The imported ablation tests' prompts (six planted-kv examples), in this model's tokens."""
    from locos_bench.tasks import load_task, make_examples

    return [planted.tokenizer(e.prompt)["input_ids"] for e in make_examples(load_task("planted-kv"), 6)]


EXPECTED = {
    # architecture: (wrapped HF class, sliding layers, post-attention norm, GQA group size)
    "qwen3": ("Qwen3ForCausalLM", [], False, 4),
    "olmo3": ("Olmo3ForCausalLM", [0, 1, 2], True, 1),
    "gemma3-text": ("Gemma3ForCausalLM", [0, 1, 2, 3, 4], True, 4),
    "gemma3-multimodal": ("Gemma3ForCausalLM", [0, 1, 2, 3, 4], True, 2),
    "llama3": ("LlamaForCausalLM", [], False, 4),
    "qwen3-moe": ("Qwen3MoeForCausalLM", [], False, 8),
    "olmoe": ("OlmoeForCausalLM", [], False, 1),
    "mixtral": ("MixtralForCausalLM", [], False, 4),
    "gpt-oss": ("GptOssForCausalLM", [0], False, 8),
}


ROUTED = {
    # architecture: (router class, experts per layer, top k, renormalised), scaled from the real
    # checkpoint's 128/8, 64/8, 8/2 and 32/4
    "qwen3-moe": ("Qwen3MoeTopKRouter", 8, 2, True),
    "olmoe": ("OlmoeTopKRouter", 8, 2, False),
    "mixtral": ("MixtralTopKRouter", 8, 2, True),
    "gpt-oss": ("GptOssTopKRouter", 8, 2, True),
}


def test_structure_is_the_real_checkpoints(real_model, arch):
    cls, sliding, post_norm, group = EXPECTED[arch]
    geo = real_model.geometry
    experts = real_model.info.get("experts")
    if arch in ROUTED:
        router, n_experts, top_k, renormalised = ROUTED[arch]
        assert experts == {"layers": list(range(geo.n_layers)), "n_experts": n_experts, "top_k": top_k,
                           "renormalised": renormalised, "router": router}
        assert real_model.describe()["experts"] == experts
    else:
        assert experts is None
    assert type(real_model.bridge.original_model).__name__ == cls
    assert geo.sliding_layers == sliding
    assert geo.sliding_window == (TINY["window"] if sliding else None)
    assert geo.attn_out_norm is post_norm
    assert geo.n_heads // geo.n_kv_heads == group
    assert geo.norm_offset is arch.startswith("gemma3")
    if arch == "gemma3-multimodal":
        assert real_model.info["language_model_of"] == "Gemma3ForConditionalGeneration"
        assert real_model.describe()["language_model_of"] == "Gemma3ForConditionalGeneration"


def test_sliding_layers_do_not_see_past_the_window(real_model):
    geo = real_model.geometry
    if not geo.sliding_layers:
        pytest.skip("no sliding-window layers in this architecture")
    ids = real_model.tokenizer(" ".join(["the quiet river"] * 20))["input_ids"]
    assert len(ids) > 3 * geo.sliding_window
    local = geo.sliding_layers[0]
    glob = next(L for L in range(geo.n_layers) if L not in geo.sliding_layers)
    _, cache = heads.run_and_capture(real_model, ids, heads.hooks_for_rows([local, glob]), logits_at=[len(ids) - 1])
    last = [len(ids) - 1]
    beyond = len(ids) - geo.sliding_window
    assert heads.attention_rows(real_model, cache, local, last)[:, 0, :beyond].abs().max() == 0
    assert heads.attention_rows(real_model, cache, glob, last)[:, 0, :beyond].abs().min() > 0


def test_every_detector_conforms(real_model, arch):
    """The conformance suite on each dense architecture.

    GQA's check runs where heads share key/values and the detector scored anything: on
    random weights `retrieval-head` (argmax copying) can score every head zero. The mixtures
    of experts share their attention code with the dense models: their quick run below scores
    every detector, and CI's minutes go there instead of a second conformance pass."""
    if arch in ROUTED:
        pytest.skip("a mixture of experts: its attention is the dense path; the quick run scores every detector")
    from locos_bench.detectors import conformance, detector_names, make_detector
    from locos_bench.tasks import load_task, make_examples

    short = load_task("kv-retrieval").model_copy(update={"context_lengths": [120]})  # still > 3 windows
    examples = make_examples(short, 2, model=real_model)
    assert all(len(real_model.tokenizer(e.prompt)["input_ids"]) > 3 * TINY["window"] for e in examples)
    mha = real_model.geometry.n_kv_heads == real_model.geometry.n_heads
    with conformance.on_model(real_model, examples):
        for name in detector_names():
            # Random weights never give the gold answer: the gated detectors would drop every
            # trial (a LocosError by design), so they are checked with the gate off.
            target = make_detector(name, gate=False) if name in ("locos", "dla") else name
            for check in conformance.detector_checks(target):
                if check.name == "gqa":
                    scores = conformance._shared_result(conformance.make_instance(target)).scores
                    if mha or not scores.any():
                        continue
                check()


WHOLE_RUN_ELSEWHERE = {"llama3": "smollm2", "gemma3-text": "gemma3"}
"""Dense architectures whose whole run an embedded real model of the same class already makes
in CI (`tests/regression/test_reference_runs.py`); their miniatures keep every other test here."""


def test_quick_preset_ends_with_a_leaderboard(architecture_dirs, arch, tmp_path):
    """The CLI's whole run on each architecture; one budget and fewer evaluation examples than
    `quick` keep the matrix inside CI's budget (random weights never stop generating early)."""
    if arch in WHOLE_RUN_ELSEWHERE:
        pytest.skip(f"the reference run of {WHOLE_RUN_ELSEWHERE[arch]} makes this class's whole run")
    from locos_bench.cli import main

    out = tmp_path / "run"
    # Random weights never say the gold answer, so the gated detectors (`locos`, `dla`) fail
    # their units by design: the run ends with a leaderboard that names them, and exit 1.
    # gpt-oss decodes on the explicit attention path (its sinks), so its run leaves out the
    # arithmetic control, whose random-weight answers run to the token limit: half its CI time.
    tasks = ["--tasks", "kv-retrieval"] if arch in EXPLICIT_ONLY else []
    code = main(["run", "--model", str(architecture_dirs[arch]), "--preset", "quick", "--quiet",
                 "--n-eval", "2", "--budgets", "2", "--random-draws", "1", "--rank-diagnostic", "1",
                 "--output-dir", str(out), "--allow-failures", *tasks])
    assert code == 0
    failed = {(getattr(u.kind, "value", u.kind), u.detector) for u in RunDir(out).read_units() if u.error}
    assert failed <= {("scores", "locos"), ("scores", "dla")}, failed
    board = (out / "leaderboard.md").read_text()
    assert "locos" in board and "random" in board and "kv-retrieval" in board
