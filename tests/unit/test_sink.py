"""The sink position: `sink="keep"` leaves each row's BOS (its position 0) untouched, `sink="mean"`
writes the mean there too, and a prompt that starts with a real token has no sink (its first
token counts in the mean and is replaced under either rule)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from locos_bench import cli
from locos_bench.errors import LocosError
from locos_bench.evaluation import generate_answers
from locos_bench.interventions import AblationSpec, HeadAblation, HeadSetAblation, reference_means, token_positions
from locos_bench.interventions.positions import bound_positions
from locos_bench.run.manifest import Manifest

KEEP = AblationSpec.parse("mean", sink="keep")
MEAN = AblationSpec.parse("mean", sink="mean")
LAYER, HEAD = 1, 0
PUBLISHED = Path(__file__).resolve().parents[2] / "leaderboard"


@pytest.fixture(scope="module")
def data(planted):
    from locos_bench.run import RunConfig
    from locos_bench.run.splits import build_task_data
    from locos_bench.tasks import load_task

    cfg = RunConfig(model="planted", tasks=["planted-kv"], n_ref=4, n_eval=6, detectors=["random"]).resolved()
    return build_task_data(load_task("planted-kv"), cfg, planted)


@pytest.fixture(scope="module")
def reference(planted, data):
    return [t.input_ids for t in data.tokenized(planted, "reference")]


def _z(model, ids, layer, hooks=()):
    store = {}

    def keep(z, hook):
        store["z"] = z.detach().clone()

    with torch.no_grad(), token_positions(torch.arange(len(ids))[None]):
        model.bridge.run_with_hooks(torch.tensor([ids]), fwd_hooks=[*hooks, (f"blocks.{layer}.attn.hook_z", keep)])
    return store["z"][0]


def test_parse_and_bad_rule():
    assert KEEP.keeps_sink and not MEAN.keeps_sink
    assert not AblationSpec.parse("zero", sink="keep").keeps_sink  # the sink rule is mean ablation's
    with pytest.raises(LocosError, match="unknown sink rule 'foo'; choose keep or mean"):
        AblationSpec.parse("mean", sink="foo")


@pytest.mark.parametrize("kind", ["HeadAblation", "HeadSetAblation"])
def test_keep_leaves_each_rows_first_real_token_in_a_left_padded_batch(planted, reference, kind):
    means = reference_means(planted, reference)
    assert means.bos_sink
    if kind == "HeadAblation":
        (_, fn), = HeadAblation([(LAYER, HEAD)], KEEP, means).hooks()
    else:
        (_, fn), = HeadSetAblation([[(LAYER, HEAD)]], KEEP, means).hooks([0, 0])
    geo = planted.geometry
    z = torch.randn(2, 5, geo.n_heads, geo.d_head)
    mean = means.mean[LAYER, HEAD]
    with token_positions(torch.tensor([[0, 1, 2, 3, 4], [0, 0, 0, 1, 2]])):  # row 1: two pads, then its BOS
        out = fn(z, None)
    assert torch.equal(out[0, 0, HEAD], z[0, 0, HEAD]) and torch.equal(out[1, 2, HEAD], z[1, 2, HEAD])
    assert torch.equal(out[0, 1:, HEAD], mean.expand(4, -1)) and torch.equal(out[1, 3:, HEAD], mean.expand(2, -1))
    others = [h for h in range(geo.n_heads) if h != HEAD]
    assert torch.equal(out[:, :, others], z[:, :, others])
    with token_positions(torch.tensor([[0, 1, 2, 3, 4], [0, 0, 0, 1, 2]])):
        old = HeadAblation([(LAYER, HEAD)], MEAN, means).hooks()[0][1](z, None)
    assert torch.equal(old[:, :, HEAD], mean.expand(2, 5, -1))  # sink=mean: every position, as before


def test_keep_in_a_real_forward_leaves_the_bos_z(planted, reference):
    means = reference_means(planted, reference)
    ids = reference[0]
    clean = _z(planted, ids, LAYER)
    kept = _z(planted, ids, LAYER, HeadAblation([(LAYER, HEAD)], KEEP, means).hooks())
    assert torch.equal(kept[0], clean[0])
    assert torch.equal(kept[1:, HEAD], means.mean[LAYER, HEAD].expand(len(ids) - 1, -1))
    assert not torch.allclose(kept[1:, HEAD], clean[1:, HEAD])


def test_keep_during_cached_generation(planted, data, reference):
    """Prefill of a left-padded batch of three prompt lengths keeps each row's BOS; the decoding
    steps (no position 0 there) are all replaced."""
    means = reference_means(planted, reference)
    assert len({len(ids) for ids in reference}) > 1
    bos_z = _z(planted, reference[0], LAYER)[0, HEAD]  # causal: a BOS's z is the same in every prompt
    mean = means.mean[LAYER, HEAD]
    seen = []

    def capture(z, hook):
        seen.append((z[:, :, HEAD].detach().clone(), bound_positions(z).clone()))

    hooks = [*HeadAblation([(LAYER, HEAD)], KEEP, means).hooks(), (f"blocks.{LAYER}.attn.hook_z", capture)]
    examples = data.evaluation
    generate_answers(planted, examples, hooks=hooks, batch_size=len(examples), max_new_tokens=3, cut=False)
    (prefill, positions), *steps = seen
    assert len(steps) == 2
    width = prefill.shape[1]
    firsts = [int((row == 0).nonzero().max()) for row in positions]  # left pads also read 0
    assert len(set(firsts)) > 1  # rows of different lengths
    for row, first in enumerate(firsts):
        assert torch.equal(positions[row, first:], torch.arange(width - first))
        assert torch.allclose(prefill[row, first], bos_z, atol=1e-6)
        assert torch.equal(prefill[row, first + 1:], mean.expand(width - first - 1, -1))
    for z, pos in steps:
        assert (pos > 0).all() and torch.equal(z, mean.expand_as(z))


def test_without_bos_the_first_token_is_an_ordinary_token(planted, reference):
    """Prompts that start with a real token (as on a tokenizer that adds no BOS): position 0
    counts in the flat mean, and `keep` replaces it like every other position."""
    bos = planted.tokenizer.bos_token_id
    assert all(ids[0] == bos for ids in reference)
    no_bos = [ids[1:] for ids in reference]
    means = reference_means(planted, no_bos)
    assert not means.bos_sink
    zs = torch.cat([_z(planted, ids, 0) for ids in no_bos])
    assert torch.allclose(means.mean[0], zs.double().mean(0).float(), atol=1e-5)
    kept = _z(planted, no_bos[0], LAYER, HeadAblation([(LAYER, HEAD)], KEEP, means).hooks())
    assert torch.equal(kept[:, HEAD], means.mean[LAYER, HEAD].expand(len(no_bos[0]), -1))


def _run(tmp_path, *extra):
    return cli.main(["run", "--model", "planted", "--detector", "random", "--random-draws", "1", "--budgets", "1",
                     "--n-calib", "1", "--n-ref", "2", "--n-eval", "2", "--rank-diagnostic", "0",
                     "--output-dir", str(tmp_path / "run"), "--quiet", *extra])


def test_manifests_before_the_option_read_as_sink_mean():
    """Every published manifest, and each with the field taken out (as written before it
    existed), reads as the rule it was made with: `mean`, the old and current default."""
    published = sorted(PUBLISHED.glob("*/manifest.json"))
    assert published
    for path in published:
        raw = json.loads(path.read_text())
        assert raw.get("sink", "mean") == "mean"
        raw.pop("sink", None)
        assert Manifest.model_validate(raw).sink == "mean"


def test_bad_sink_is_one_clear_line(tmp_path, capsys):
    assert _run(tmp_path, "--sink", "foo") == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == ["locos-bench: error: unknown sink rule 'foo'; choose keep or mean (--sink)"]
    assert not (tmp_path / "run").exists()
