"""Local HF directories: what loads, what is refused with one clear line, and chat templates.

Models here are tiny and randomly initialised (`locos_bench.models.miniature`), built offline."""

from __future__ import annotations

import shutil

import pytest

from locos_bench.errors import LocosError
from locos_bench.models import load_model, resolve_spec
from locos_bench.models.miniature import (
    THINKING_TEMPLATE,
    byte_tokenizer,
    miniature,
    random_model,
    save_local,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory):
    return miniature("qwen3", tmp_path_factory.mktemp("qwen3") / "m", chat_template=THINKING_TEMPLATE)


def test_directory_without_config_or_tokenizer(qwen3_dir, tmp_path):
    no_config = shutil.copytree(qwen3_dir, tmp_path / "no-config")
    (no_config / "config.json").unlink()
    with pytest.raises(LocosError, match="has no config.json"):
        load_model(str(no_config))
    no_tokenizer = shutil.copytree(qwen3_dir, tmp_path / "no-tokenizer")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (no_tokenizer / name).unlink()
    with pytest.raises(LocosError, match="has no tokenizer"):
        load_model(str(no_tokenizer))


def test_architecture_transformerlens_cannot_wrap(tmp_path):
    tokenizer = byte_tokenizer()
    config = dict(model_type="ctrl", n_layer=1, n_embd=32, n_head=2, dff=64, n_positions=64,
                  vocab_size=len(tokenizer))
    directory = save_local(random_model(config), tokenizer, tmp_path / "ctrl")
    with pytest.raises(LocosError, match=r"^TransformerLens cannot wrap .*CTRLLMHeadModel") as info:
        load_model(str(directory))
    assert "\n" not in str(info.value)


def test_context_longer_than_the_window(tmp_path):
    from locos_bench.tasks import load_task, make_example

    short = load_model(str(miniature("llama3", tmp_path / "short", max_position_embeddings=128)))
    with pytest.raises(LocosError, match="exceeds the model's context window of 128 tokens"):
        make_example(load_task("kv-retrieval"), 0, model=short)


def test_thinking_is_switched_off_in_chat_prompts(qwen3_dir):
    from locos_bench.tasks import load_task, make_example

    model = load_model(str(qwen3_dir))
    messages = [{"role": "user", "content": "hi"}]
    plain = model.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert plain.endswith("<think>\n"), "the test template must open a thinking block by default"
    assert model.uses_chat_template and model.chat_template_kwargs == {"enable_thinking": False}
    prompt = make_example(load_task("kv-retrieval"), 0, model=model).prompt
    assert "<|assistant|>" in prompt and "<think>" not in prompt
    assert resolve_spec("qwen3-8b").chat_template_kwargs == {"enable_thinking": False}
    assert resolve_spec("qwen3-8b-base").chat is False
