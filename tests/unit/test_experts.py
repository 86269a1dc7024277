"""A mixture of experts is recognised by its router, and one this benchmark does not know is
refused by its class name, never read as a dense model."""

from __future__ import annotations

import pytest

from locos_bench.errors import LocosError
from locos_bench.models.experts import ROUTERS, expert_geometry, touched_share
from locos_bench.models.miniature import TINY, random_model, scale_down


def _tiny(config, **extra):
    return random_model(scale_down({**config, **extra}, vocab_size=64))


QWEN2_MOE = {
    # Qwen1.5-MoE-A2.7B's architecture numbers (a shared expert beside 60 routed ones, top 4)
    "architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "hidden_size": 2048,
    "intermediate_size": 5632, "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16,
    "num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632, "norm_topk_prob": False, "vocab_size": 151936,
}


def test_an_unknown_router_is_refused_by_its_class_name():
    model = _tiny(QWEN2_MOE)
    with pytest.raises(LocosError, match=r"Qwen2MoeForCausalLM: router Qwen2MoeTopKRouter is not one .*"
                                         r"refusing to treat a mixture of experts as dense"):
        expert_geometry(model)


def test_experts_named_in_the_config_but_no_router_found_are_refused():
    from locos_bench.models.architecture import shipped_config

    model = _tiny(shipped_config("llama3-8b"))
    assert expert_geometry(model) is None  # dense
    model.config.num_local_experts = 8  # a config that says experts, over layers with none
    with pytest.raises(LocosError, match="names 8 experts but no layer has a router"):
        expert_geometry(model)


@pytest.mark.parametrize("config", ["qwen3-30b-a3b", "olmoe-1b-7b", "mixtral-8x7b", "gpt-oss-20b"])
def test_known_routers_scale_down_with_fewer_routed_than_experts(config):
    from locos_bench.models.architecture import shipped_config

    geo = expert_geometry(_tiny(shipped_config(config)))
    assert geo.router in ROUTERS
    assert geo.n_experts == TINY["experts"] and geo.top_k == TINY["experts_per_token"] < geo.n_experts
    assert geo.n_total_experts == len(geo.layers) * geo.n_experts


def test_touched_share_grows_to_every_expert():
    from locos_bench.models.experts import ExpertGeometry

    geo = ExpertGeometry(layers=[0], n_experts=8, top_k=2, renormalised=True, router="MixtralTopKRouter")
    assert touched_share(geo, 1) == pytest.approx(0.25)
    assert touched_share(geo, 2) == pytest.approx(1 - 0.75 ** 2)
    assert touched_share(geo, 64) == pytest.approx(1.0, abs=1e-7)


def test_the_cli_refuses_an_unknown_router_in_one_line(tmp_path, capsys):
    """A local checkpoint of an unrecognised mixture of experts: one line, exit 2, no traceback."""
    from locos_bench.cli import main
    from locos_bench.models.miniature import byte_tokenizer, save_local

    tokenizer = byte_tokenizer()
    save_local(random_model(scale_down(QWEN2_MOE, vocab_size=len(tokenizer))), tokenizer, tmp_path / "qwen2-moe")
    capsys.readouterr()  # what saving printed
    assert main(["models", str(tmp_path / "qwen2-moe"), "--load"]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "router Qwen2MoeTopKRouter" in lines[0] and "Traceback" not in err
