"""The LOCOS authors' protocol (`--preset paper`): the preset against its documented table,
their NoLiMa grids, their parametric control on a fixture in their dataset's schema, their
random-head seeds and their dissociation score DS(k) on a hand-computed run."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from types import SimpleNamespace

import datasets
import pytest
import yaml

from locos_bench.errors import LocosError
from locos_bench.models.architecture import HeadGeometry
from locos_bench.presets import PRESETS, preset_contexts
from locos_bench.report.rendering.dissociation import dissociation_section
from locos_bench.report.statistics.dissociation import dissociation, dissociation_score
from locos_bench.run import RunConfig
from locos_bench.run.manifest import DetectorEntry, Manifest, Provenance, TaskEntry
from locos_bench.run.plan import draw_params
from locos_bench.run.records import EvalUnit
from locos_bench.run.splits import build_task_data
from locos_bench.tasks import load_task, make_example, make_examples
from locos_bench.tasks.files import resolve_tasks, with_data
from locos_bench.tasks.metrics import exact_match_strict
from locos_bench.tasks.nolima import spread_order

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def offline_hub(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path_factory.mktemp("hf-cache"))


# ---------------------------------------------------------------------------------------
# The preset against docs/paper-protocol.md


def protocol_settings() -> dict[str, object]:
    """Every `name = value` the protocol table may state, read from the preset and tasks."""
    paper = PRESETS["paper"]
    nolima, control = load_task("nolima-locos"), load_task("parametric-arithmetic")
    return {
        "budgets": paper["budgets"], "n_calib": paper["n_calib"], "n_ref": paper["n_ref"],
        "n_eval": paper["n_eval"], "random_draws": paper["random_draws"], "random_seed": paper["random_seed"],
        "prompt_format": nolima.prompt_format, "question_types": nolima.source.args["question_types"],
        "context_lengths": nolima.context_lengths, "depths": nolima.depths,
        "calibration.context_lengths": nolima.calibration.context_lengths,
        "calibration.depths": nolima.calibration.depths,
        "calibration.characters": nolima.calibration.args["characters"],
        "characters": nolima.source.args["characters"], "system_prompt": nolima.source.args["system_prompt"],
        "max_new_tokens": [nolima.max_new_tokens, control.max_new_tokens],
        "ablation": paper["ablation"], "bottom_k": paper["bottom_k"],
        "metrics[0]": [nolima.metrics[0], control.metrics[0]],
    }


def documented_settings() -> dict[str, list[object]]:
    """The `name = value` entries of the *ours* column of docs/paper-protocol.md."""
    text = (ROOT / "docs" / "paper-protocol.md").read_text()
    section = text.split("## The settings", 1)[1].split("\n## ", 1)[0]
    found: dict[str, list[object]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] in ("setting", "---"):
            continue
        for name, value in re.findall(r"`([\w.\[\]]+) = ([^`]+)`", cells[1]):
            found.setdefault(name, []).append(yaml.safe_load(value))
    return found


def test_the_preset_is_the_documented_protocol():
    actual, documented = protocol_settings(), documented_settings()
    assert set(documented) == set(actual), "the table and the preset name different settings"
    for name, values in documented.items():
        want = actual[name] if isinstance(actual[name], list) and name in ("max_new_tokens", "metrics[0]") \
            else [actual[name]]
        for value in values:
            assert value in want, f"docs/paper-protocol.md says {name} = {value}; the preset has {actual[name]}"
    assert sorted(v for vs in documented.values() for v in vs if v in (100, 50)) == [50, 50, 100]


def test_the_methodology_states_the_presets_draws():
    text = " ".join((ROOT / "docs" / "methodology.md").read_text().split())
    stated = re.findall(r"The paper preset uses (\w+) calibration draws?\b.*? and (\d+) random draws", text)
    assert len(stated) == 1, "docs/methodology.md no longer states the paper preset's draws in one sentence"
    calibration, random_draws = stated[0]
    words = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5}
    assert (words.get(calibration, calibration), int(random_draws)) == \
        (PRESETS["paper"]["calibration_draws"], PRESETS["paper"]["random_draws"])


def test_paper_preset_resolves_the_authors_tasks_where_their_data_is(tmp_path):
    write_parametric(tmp_path / "parametric-arithmetic")
    specs, fallbacks = resolve_tasks(PRESETS["paper"]["tasks"], data=tmp_path, prefer_real=True)
    assert [s.name for s in specs] == ["nolima-synth", "musique-synth", "babilong-synth", "parametric-arithmetic"]
    assert fallbacks["nolima-synth"].startswith("nolima-locos: ") and "does not exist" in fallbacks["nolima-synth"]
    # the memory plan covers the longest the paper preset may run: NoLiMa at 16k + 100 new tokens
    assert preset_contexts()["paper"] == 16000 + 100
    cfg = RunConfig(model="planted", preset="paper").resolved()
    assert (cfg.random_draws, cfg.random_seed, cfg.budgets) == (20, 42, (1, 5, 10, 20, 50, 100))


# ---------------------------------------------------------------------------------------
# NoLiMa as they run it: the first K names, the entry's book, the grids


def test_nolima_locos_takes_the_first_names_and_the_entrys_book(tmp_path):
    from test_loaders import nolima_locos_case

    spec, cfg, _ = nolima_locos_case(tmp_path)
    ev = make_examples(spec, 10)
    assert {e.answers[0] for e in ev} == {"Yuki"}  # one name: the first of the set
    assert {e.metadata["book"] for e in ev} == {"rand_book_1.txt"}  # entry 0's book
    assert not ev[0].metadata["system_prompt"]
    cal = make_examples(spec.for_calibration(), 5 * 3 * 2 * 10)  # five tests x three names x the grid
    assert {e.answers[0] for e in cal} == {"Yuki", "Stuart", "Katie"}
    cells = {(e.metadata["test"], e.answers[0], e.metadata["context_length"], e.metadata["depth"]) for e in cal}
    assert len(cells) == len(cal)  # the stride visits every combination once
    data = build_task_data(spec, cfg, None)
    assert {e.metadata["context_length"] for e in data.calibration} <= {100, 150}
    assert {e.metadata["context_length"] for e in data.evaluation} <= {100, 200}


def test_spread_order_is_a_permutation_whose_prefix_spans_the_grid():
    order = [spread_order(step, 3, 100) for step in range(300)]
    assert sorted(order) == [(c, cell) for c in range(3) for cell in range(100)]
    first = order[:20]
    assert {c for c, _ in first} == {0, 1, 2}
    assert len({cell // 10 for _, cell in first}) >= 8 and len({cell % 10 for _, cell in first}) >= 8
    with pytest.raises(LocosError, match="characters must be at least 1"):
        spread_order(0, 0, 25)


def test_nolima_locos_reads_the_nolima_data_directory(tmp_path):
    from test_loaders import write_nolima

    write_nolima(tmp_path / "nolima")
    specs, fallbacks = resolve_tasks(["nolima-synth"], data=tmp_path, prefer_real=True)
    assert [s.name for s in specs] == ["nolima-locos"] and not fallbacks
    assert specs[0].source.args["path"] == str(tmp_path / "nolima")


# ---------------------------------------------------------------------------------------
# aryopg/parametric-arithmetic-eval: question, answer, source, index (rows written here)

PARAMETRIC_ROWS = [
    {"question": "Which country does Lyon belong to?", "answer": "France", "source": "city_country", "index": 0},
    {"question": "Which country does Osaka belong to?", "answer": "Japan", "source": "city_country", "index": 1},
    {"question": "What is Mira Holt's occupation?", "answer": "painter", "source": "popqa", "index": 2},
    {"question": "In what city was Tom Vale born?", "answer": "Leeds", "source": "popqa", "index": 3},
    {"question": "What is 7 plus 5?", "answer": "12", "source": "arithmetic", "index": 4},
    {"question": "What is 9 minus 4?", "answer": "5", "source": "arithmetic", "index": 5},
]


def write_parametric(root: Path, hub_layout: bool = True) -> Path:
    """The hub's layout (`data/train-00000-of-00001.parquet`) or the builder's JSONL."""
    if hub_layout:
        import pyarrow as pa
        import pyarrow.parquet as pq

        (root / "data").mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(PARAMETRIC_ROWS), root / "data" / "train-00000-of-00001.parquet")
    else:
        root.mkdir(parents=True, exist_ok=True)
        (root / "parametric_arithmetic.jsonl").write_text("".join(json.dumps(r) + "\n" for r in PARAMETRIC_ROWS))
    return root


class Template:
    """The smallest tokenizer with a chat template."""
    bos_token = None

    def apply_chat_template(self, messages, **_):
        return "".join(f"<{m['role']}>{m['content']}</{m['role']}>" for m in messages) + "<assistant>"


@pytest.mark.parametrize("hub_layout", [True, False])
def test_parametric_loader_reads_their_layouts_sources_in_turn(tmp_path, hub_layout):
    spec = with_data(load_task("parametric-arithmetic"), write_parametric(tmp_path, hub_layout))
    examples = make_examples(spec, 6)
    assert [e.metadata["source"] for e in examples] == ["city_country", "popqa", "arithmetic"] * 2
    assert [e.answers for e in examples[:3]] == [["France"], ["painter"], ["12"]]
    assert len({e.metadata["item"] for e in examples}) == 6
    with pytest.raises(LocosError, match=r"has only 6 rows \(asked for example 6\)"):
        make_example(spec, 6)


def test_parametric_prompt_is_their_system_prompt_and_worked_turns(tmp_path):
    spec = with_data(load_task("parametric-arithmetic"), write_parametric(tmp_path))
    chat = make_example(spec.model_copy(update={"prompt_format": "chat"}), 2, model=Template())
    assert chat.prompt.startswith("<system>Answer the following question in less than 10 words.\n"
                                  "Give only the answer, nothing else.</system><user>Which country does Brighton")
    assert "<user>9+3</user><assistant>12</assistant><user>What is 7 plus 5?</user><assistant>" in chat.prompt
    assert chat.prompt[slice(*chat.question_span)] == "What is 7 plus 5?" and chat.target == "12"
    plain = make_example(spec, 2)
    assert "Question: 9+3\nAnswer: 12\n\nQuestion: What is 7 plus 5?\nAnswer:" in plain.prompt
    assert plain.prompt[slice(*plain.question_span)] == "What is 7 plus 5?" and plain.target == " 12"


def test_parametric_rows_without_their_fields_are_one_line(tmp_path):
    path = tmp_path / "parametric_arithmetic.jsonl"
    path.write_text(json.dumps({"question": "x?", "source": "popqa", "index": 0}) + "\n")
    with pytest.raises(LocosError, match=r"parametric_arithmetic.jsonl: row 0 has no field 'answer'"):
        make_example(with_data(load_task("parametric-arithmetic"), path), 0)


def test_exact_match_strict_is_their_lowercase_comparison():
    assert exact_match_strict("  united kingdom\nmore", ["United Kingdom"]) == 1.0
    assert exact_match_strict("The United Kingdom", ["United Kingdom"]) == 0.0  # no article stripping
    assert exact_match_strict("12.", ["12"]) == 0.0  # no punctuation stripping
    assert exact_match_strict("", [""]) == 0.0


# ---------------------------------------------------------------------------------------
# Random heads drawn as theirs: random.Random(seed).sample over (layer, head), row-major


def test_random_draws_are_their_seeded_samples():
    from locos_bench.detectors import make_detector
    from locos_bench.detectors.random import stdlib_sample_exact

    geo = HeadGeometry(36, 32, 8, 128, 4096, 1000, None, [], False, False)  # Qwen3-8B: 1,152 heads
    model = SimpleNamespace(geometry=geo)
    heads = [(layer, head) for layer in range(36) for head in range(32)]
    for draw, seed in enumerate((42, 43, 44)):
        det = make_detector("random", **draw_params("random", draw, 42))
        scores = det.score(model, [], rng=None)
        for k in (1, 5, 10, 20, 50, 100):
            assert stdlib_sample_exact(len(heads), k)
            assert scores.top_k(k) == random.Random(seed).sample(heads, k), (seed, k)
    assert draw_params("random", 3, 42) == {"seed": 45} and draw_params("locos", 0, 42) == {}
    assert draw_params("random", 0, None) == {}
    assert not stdlib_sample_exact(48 * 16, 100)  # gemma-3-12b-it at k = 100: the pool branch


# ---------------------------------------------------------------------------------------
# DS(k) on a run worked by hand

def _entry(name: str, kind: str, metric: str, n: int) -> TaskEntry:
    return TaskEntry(name=name, version=1, kind=kind, metrics=[metric, "gold_logprob"],
                     splits={"calibration": [], "reference": [], "evaluation": list(range(n))}, data_hash="0" * 64)


def _unit(task: str, det: str, k: int, values: list[float], metric: str, heads_from: str | None = None,
          draw: int = 0) -> EvalUnit:
    return EvalUnit(task=task, detector=det, k=k, draw=draw, values={metric: values}, heads_from=heads_from)


def test_dissociation_score_by_hand():
    manifest = Manifest(
        model="m", model_info={}, budgets=[1, 5], ablation="mean", random_draws=2, seed=0, rank_diagnostic=0,
        tasks=[_entry("nolima-locos", "retrieval", "rouge_l", 4), _entry("parametric-arithmetic", "control",
                                                                         "exact_match_strict", 4),
               _entry("arithmetic", "control", "number_match", 4)],
        detectors=[DetectorEntry(name=n, params={}, source="built-in", cost="1", stochastic=n == "random")
                   for n in ("locos", "random")],
        batch_size=1, control_heads="each-retrieval",
        provenance=Provenance(packages={}, git_commit=None, device="cpu", python="3", platform="x",
                              started_at="2025-01-01T00:00:00Z"))
    R, P = "nolima-locos", "parametric-arithmetic"
    units = [
        _unit(R, "baseline", 0, [1.0, 1.0, 0.5, 0.5], "rouge_l"),                    # R0 = 0.75
        _unit(P, "baseline", 0, [1, 1, 1, 0], "exact_match_strict"),                 # P0 = 0.75
        _unit("arithmetic", "baseline", 0, [1, 1, 1, 1], "number_match"),
        _unit(R, "locos", 1, [0.5, 0.5, 0.5, 0.0], "rouge_l"),                       # R(1) = 0.375
        _unit(P, "locos", 1, [1, 1, 1, 0], "exact_match_strict", heads_from=R),     # P(1) = 0.75
        _unit(R, "locos", 5, [0, 0, 0, 0], "rouge_l"),                               # R(5) = 0
        _unit(P, "locos", 5, [1, 0, 0, 0], "exact_match_strict", heads_from=R),     # P(5) = 0.25
        _unit("arithmetic", "locos", 1, [0, 0, 0, 0], "number_match", heads_from=R),
        _unit("arithmetic", "locos", 5, [0, 0, 0, 0], "number_match", heads_from=R),
        # random, two draws: R(1) = (0.75 + 0.25) / 2 = 0.5, P(1) = (0.75 + 0.5) / 2 = 0.625
        _unit(R, "random", 1, [1, 1, 0.5, 0.5], "rouge_l", draw=0),
        _unit(R, "random", 1, [0.5, 0.5, 0, 0], "rouge_l", draw=1),
        _unit(P, "random", 1, [1, 1, 1, 0], "exact_match_strict", heads_from=R, draw=0),
        _unit(P, "random", 1, [1, 1, 0, 0], "exact_match_strict", heads_from=R, draw=1),
    ]
    rows = {(r.control, r.detector): r for r in dissociation(manifest, units, frozenset({P}))}
    assert set(rows) == {(P, "locos"), (P, "random")}
    locos, rand = rows[(P, "locos")], rows[(P, "random")]
    # DS(1) = (0.75 - 0.375) / 0.75 - (0.75 - 0.75) / 0.75 = 0.5; DS(5) = 1 - 2/3 = 1/3
    assert locos.ds == pytest.approx({1: 0.5, 5: 1 / 3}) and locos.k_star == 1
    assert rand.ds == pytest.approx({1: (0.75 - 0.5) / 0.75 - (0.75 - 0.625) / 0.75})  # 1/3 - 1/6
    assert dissociation_score(0.75, 0.375, 0.75, 0.75) == pytest.approx(0.5)
    section = dissociation_section(manifest, units)
    assert "| nolima-locos (rouge_l) → parametric-arithmetic (exact_match_strict) | locos | 0.500 | 0.333 | 1 |" \
        in section
    assert "arithmetic (number_match)" not in section  # DS is shown against the parametric control only
    zero = [u.model_copy(update={"values": {"exact_match_strict": [0, 0, 0, 0]}}) if u.task == P and u.k == 0
            else u for u in units]
    assert dissociation(manifest, zero, frozenset({P})) == []  # P0 = 0: undefined, left out


# ---------------------------------------------------------------------------------------
# What adapted detectors adapt, in the leaderboard's detector table


def test_adapted_detectors_say_what_they_adapt_in_the_detector_table():
    from locos_bench.report.rendering.tables import detectors_table
    from locos_bench.run.manifest import detector_entry

    entries = [detector_entry(n) for n in ("path-patching", "attention-knockout", "echo", "razor-attention", "locos")]
    said = {e.name: e.adapts for e in entries}
    assert "Wang et al. 2023" in said["path-patching"] and "Geva et al. 2023" in said["attention-knockout"]
    assert "echo score alone" in said["echo"] and "united" in said["razor-attention"]
    manifest = SimpleNamespace(detectors=entries)
    text = detectors_table(SimpleNamespace(manifest=manifest))
    assert "adapts from its reference" in text and "Wang et al. 2023's path patching" in text
    old = SimpleNamespace(detectors=[e.model_copy(update={"adapts": ""}) for e in entries])
    assert "adapts" not in detectors_table(SimpleNamespace(manifest=old))  # older manifests: the old table
