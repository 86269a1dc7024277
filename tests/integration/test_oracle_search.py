"""The cross-fitted, pruned oracle search (`evaluation.oracle_search`) on the planted model:
each greedy step is the best candidate on its fold's half (checked by brute force), each
example is read by the set chosen without it, outcomes equal the run's own evaluation of a set,
and a killed search resumes without measuring a finished set again."""

from __future__ import annotations

import itertools
import json
import os

import pytest
import torch

from locos_bench.errors import LocosError
from locos_bench.evaluation import oracle_search as osr
from locos_bench.evaluation.oracle import all_heads
from locos_bench.evaluation.task_eval import evaluate_head_sets, evaluate_task
from locos_bench.interventions import AblationSpec, HeadSetAblation, reference_means
from locos_bench.names import set_name
from locos_bench.run.splits import SplitSizes, build_task_data
from locos_bench.tasks import load_task

SINK, WINDOW = 1, 4


@pytest.fixture(scope="module")
def setting(planted):
    spec = load_task("planted-kv")
    data = build_task_data(spec, SplitSizes(n_calib=2, n_ref=8, n_eval=12), planted)
    means = reference_means(planted, [t.input_ids for t in data.tokenized(planted, "reference")])
    ablation = AblationSpec("mean")
    measures = {"necessity": osr.necessity_measure(planted, spec, data.evaluation, means, ablation),
                "sufficiency": osr.sufficiency_measure(planted, spec, data.evaluation, sink=SINK, window=WINDOW)}
    items = [ex.item for ex in data.evaluation]
    base = lambda: osr.Outcome.from_rows(evaluate_task(planted, spec, data.evaluation))  # noqa: E731
    return planted, spec, data, means, ablation, measures, items, base


def _search(setting, store=None, **kw):
    model, _, _, _, _, measures, items, base = setting
    return osr.search(all_heads(model), items, measures, base, store=store, **{"k_max": 3, "prune": 4, **kw})


def test_each_greedy_step_is_the_best_candidate_on_its_fit_half(setting):
    model = setting[0]
    store = osr.SetStore(None, {})
    result = _search(setting, store)
    base = store.get("unablated", ())
    heads = all_heads(model)
    for mode in osr.MODES:
        singles = {h: store.get(mode, (h,)) for h in heads}
        for fold in result[mode]["folds"]:
            fit = fold["fit"]
            by_single = sorted(heads, key=lambda h: (-osr.effect(mode, base, singles[h], "gold", fit), h))
            assert fold["path"][0] == set_name([by_single[0]])
            for k in (2, 3):
                previous = store.sets[mode][fold["path"][k - 2]]
                current = [h for h in heads if set_name([h]) in fold["path"][k - 2].split("+")]
                pool = [h for h in by_single if h not in current][:4]
                candidates = [tuple(sorted((*current, h))) for h in pool]
                values = [osr.effect(mode, base, store.get(mode, c), "gold", fit) for c in candidates]
                assert fold["path"][k - 1] == set_name(candidates[values.index(max(values))])
                assert previous is not None


def test_every_example_is_read_by_the_set_chosen_without_it(setting):
    store = osr.SetStore(None, {})
    result = _search(setting, store)
    assert result["sufficiency"]["floor"] == store.get("sufficiency", ()).to_json()
    assert "floor" not in result["necessity"]
    first, second = result["halves"]
    assert sorted(first + second) == list(range(len(setting[6]))) and not set(first) & set(second)
    for mode in osr.MODES:
        for k in ("1", "2", "3"):
            for fold in result[mode]["folds"]:
                assert set(fold["fit"]).isdisjoint(fold["read"])
                chosen = store.sets[mode][fold["path"][int(k) - 1]]
                for i in fold["read"]:
                    assert result[mode]["chosen"][k]["gold"][i] == chosen.gold[i]
                    assert result[mode]["chosen"][k]["metric"][i] == chosen.metric[i]


def test_halves_keep_an_items_examples_together():
    items = ["a", "b", "a", "c", "d", "b", "e", "f"]
    first, second = osr.halves(items, seed=3)
    assert {items[i] for i in first}.isdisjoint({items[i] for i in second})
    assert osr.halves(items, seed=3) == (first, second)
    with pytest.raises(LocosError, match="at least two items"):
        osr.halves(["a", "a", "a"], seed=0)


def test_a_sets_outcome_is_the_runs_evaluation_of_it(setting):
    """Necessity through the search equals `evaluate_head_sets` of that set alone, as the
    harness evaluates it (another batching of sets: a stated tolerance on the log-prob)."""
    model, spec, data, means, ablation, measures, _, _ = setting
    sets = [((1, 0),), ((0, 2), (2, 1))]
    through_search = measures["necessity"](sets, range(len(data.evaluation)))
    for heads, outcome in zip(sets, through_search):
        rows = evaluate_head_sets(model, spec, data.evaluation, HeadSetAblation([list(heads)], ablation, means))[0]
        alone = osr.Outcome.from_rows(rows)
        assert outcome.metric == alone.metric
        torch.testing.assert_close(torch.tensor(outcome.gold), torch.tensor(alone.gold), rtol=1e-5, atol=1e-4)


def test_a_killed_search_resumes_without_measuring_a_finished_set(setting, tmp_path):
    identity = {"model": "planted", "task": "planted-kv"}
    path = tmp_path / "resume.jsonl"
    full = _search(setting, osr.SetStore(path, identity))
    lines = path.read_text().splitlines()
    assert len(lines) - 1 == sum(full[m]["measured_now"] for m in osr.MODES) + 1  # + the unablated outcome
    # A kill: the last 5 sets lost, the line before them torn mid-write.
    path.write_text("\n".join(lines[:-6]) + "\n" + lines[-6][:17])
    resumed = _search(setting, osr.SetStore(path, identity))
    assert sum(resumed[m]["measured_now"] for m in osr.MODES) == 6
    assert {m: resumed[m]["chosen"] for m in osr.MODES} == {m: full[m]["chosen"] for m in osr.MODES}
    again = _search(setting, osr.SetStore(path, identity))
    assert sum(again[m]["measured_now"] for m in osr.MODES) == 0
    assert all(json.loads(line) for line in path.read_text().splitlines())


def test_a_resume_file_of_another_search_is_refused(tmp_path):
    path = tmp_path / "resume.jsonl"
    osr.SetStore(path, {"model": "planted", "task": "planted-kv"})
    with pytest.raises(LocosError, match=r"another search \(differs in task\)"):
        osr.SetStore(path, {"model": "planted", "task": "planted-assoc"})
    path.write_text("not json\n")
    with pytest.raises(LocosError, match="not a search's resume file"):
        osr.SetStore(path, {"model": "planted"})


def test_a_resume_file_is_one_searchs_at_a_time(tmp_path):
    path = tmp_path / "resume.jsonl"
    first = osr.SetStore(path, {"model": "planted"})
    with pytest.raises(LocosError, match=rf"{path} is in use by another search \(pid {os.getpid()}\)"):
        osr.SetStore(path, {"model": "planted"})
    first.close()
    osr.SetStore(path, {"model": "planted"}).close()  # free again


def test_unpruned_greedy_tries_every_head(setting):
    model = setting[0]
    store = osr.SetStore(None, {})
    result = _search(setting, store, k_max=2, prune=None)
    n = len(all_heads(model))
    for mode in osr.MODES:
        firsts = {fold["path"][0] for fold in result[mode]["folds"]}
        pairs = {name for name in store.sets[mode] if name.count("+") == 1}
        expected = {set_name(sorted(p)) for f in firsts for p in itertools.combinations(all_heads(model), 2)
                    if f in (set_name([p[0]]), set_name([p[1]]))}
        assert pairs == expected and len(expected) == len(firsts) * (n - 1)


def test_sufficiency_started_late_from_the_floor_equals_a_whole_forward(setting):
    """A set's sufficiency, its prefill started at its lowest layer from the floor's (every head
    streaming), equals the run's whole `--sufficiency` evaluation of it; the empty set is the
    floor, which the search reports."""
    from locos_bench.interventions import only_full

    model, spec, data, _, _, measures, _, _ = setting
    sets = [((1, 0),), ((2, 3),), ((1, 3), (2, 0)), ()]  # the first would poison a prefix captured under it; () the floor
    for heads, outcome in zip(sets, measures["sufficiency"](sets, range(len(data.evaluation)))):
        with only_full(model.bridge, list(heads), sink=SINK, window=WINDOW):
            whole = osr.Outcome.from_rows(evaluate_task(model, spec, data.evaluation))
        assert outcome.metric == whole.metric
        torch.testing.assert_close(torch.tensor(outcome.gold), torch.tensor(whole.gold), rtol=1e-5, atol=1e-5)


def test_candidates_are_measured_on_their_fit_half_and_chosen_sets_on_every_example(setting):
    """A greedy candidate is measured on the examples its choice reads (its fold's fit half),
    on the gold log-prob alone (no decoding: its metric None), and a chosen set whole on the
    half it is read on too: the search chooses the sets, and reads the values, of a search
    that measures every set whole on every example (a tolerance on the log-prob: other batches
    of examples), with fewer example evaluations (few fewer on 12 heads, where the two folds
    try mostly the same candidates; on 72, most are tried once) and fewer decoded."""
    model, _, _, _, _, measures, items, base = setting
    counted = {"half": 0, "whole": 0, "decoded": 0}

    def counting(measure, key, whole):
        def wrapped(sets, idx, common=(), gold_only=False):
            idx = range(len(items)) if whole else idx
            counted[key] += len(sets) * len(idx)
            if whole:  # every set whole: both figures
                return measure(sets, idx, common)
            counted["decoded"] += 0 if gold_only else len(sets) * len(idx)
            return measure(sets, idx, common, gold_only=gold_only)
        return wrapped

    store, whole_store = osr.SetStore(None, {}), osr.SetStore(None, {})
    half = osr.search(all_heads(model), items, {m: counting(f, "half", False) for m, f in measures.items()}, base,
                      k_max=3, prune=4, store=store)
    whole = osr.search(all_heads(model), items, {m: counting(f, "whole", True) for m, f in measures.items()}, base,
                       k_max=3, prune=4, store=whole_store)
    for mode in osr.MODES:
        assert [f["path"] for f in half[mode]["folds"]] == [f["path"] for f in whole[mode]["folds"]]
        for k, values in half[mode]["chosen"].items():
            assert values["metric"] == whole[mode]["chosen"][k]["metric"]
            torch.testing.assert_close(torch.tensor(values["gold"]), torch.tensor(whole[mode]["chosen"][k]["gold"]),
                                       rtol=1e-5, atol=1e-4)
        for fold in half[mode]["folds"]:
            for name in fold["path"]:
                assert None not in store.sets[mode][name].gold  # chosen: every example
        partial = [name for name, o in store.sets[mode].items() if None in o.gold]
        chosen = {name for fold in half[mode]["folds"] for name in fold["path"]}
        assert all("+" in name and name not in chosen for name in partial)  # candidates not chosen: a fit half
        for name, outcome in store.sets[mode].items():
            if name in chosen:  # whole on the half each fold reads it on
                reads = [i for fold in half[mode]["folds"] if name in fold["path"] for i in fold["read"]]
                assert reads and all(outcome.metric[i] is not None for i in reads)
            elif "+" in name:  # a candidate never chosen: its gold alone
                assert set(outcome.metric) == {None} and any(g is not None for g in outcome.gold), name
    assert counted["half"] < counted["whole"], counted  # 525 < 564 example evaluations here
    # Decoded: the singles, the floor and the chosen sets (348 of the 525 on 12 heads).
    assert counted["decoded"] < counted["half"], counted


def test_a_gold_only_measurement_is_the_whole_ones_gold_without_decoding(setting, monkeypatch):
    """`gold_only` gives each set the gold log-probs a whole measurement gives it, bit for bit
    (one path: the same prefill and teacher-forced pass), and no metric, in both modes and
    from a greedy step's current set; no greedy decoding runs."""
    from locos_bench.evaluation import task_eval

    _, _, _, _, _, measures, _, _ = setting
    common = ((1, 2),)
    sets = [tuple(sorted((*common, h))) for h in ((0, 0), (2, 3), (1, 0))]
    idx = [0, 3, 4, 7]
    greedy = task_eval._greedy
    for mode, measure in measures.items():
        for start in ((), common):
            chosen = sets if start else [((1, 0),), ((2, 3),)]
            monkeypatch.setattr(task_eval, "_greedy", greedy)
            whole = measure(chosen, idx, start)
            monkeypatch.setattr(task_eval, "_greedy", lambda *a, **k: pytest.fail("decoded"))
            gold = measure(chosen, idx, start, gold_only=True)
            for w, g in zip(whole, gold, strict=True):
                assert g.gold == w.gold and set(g.metric) == {None}, mode
                assert g.lacks(idx, "gold") == [] and g.lacks(idx) == idx


def test_sets_holding_the_current_set_start_at_their_added_head_from_its_prefill(setting):
    """A greedy step's candidates (the current set plus one head) start at the added head's
    layer from the current set's own prefill: each equals the set's whole evaluation, whether
    the added head sits below the current set's heads, beside one in its layer, above, or at
    layer 0 (the whole forward)."""
    model, spec, data, means, ablation, measures, _, _ = setting
    common = ((1, 2), (2, 1))
    sets = [tuple(sorted((*common, h))) for h in ((0, 0), (1, 0), (2, 3), (1, 3), (0, 2))]
    idx = [0, 2, 3, 5, 6, 9]
    late = measures["necessity"](sets, idx, common)
    whole = evaluate_head_sets(model, spec, [data.evaluation[i] for i in idx],
                               HeadSetAblation([list(s) for s in sets], ablation, means))
    for outcome, rows in zip(late, whole, strict=True):
        alone = osr.Outcome.from_rows(rows, idx, len(data.evaluation))
        assert outcome.metric == alone.metric
        torch.testing.assert_close(torch.tensor([outcome.gold[i] for i in idx]), torch.tensor([alone.gold[i] for i in idx]),
                                   rtol=1e-5, atol=1e-4)
    with pytest.raises(LocosError, match="must hold L1H2\\+L2H1 and one head more"):
        measures["necessity"]([common], idx, common)


def test_sufficiency_candidates_start_at_their_added_head_from_the_current_sets_prefill(setting):
    """Sufficiency's greedy candidates start at the added head's layer from the prefill with
    only the current set full: each equals the run's whole `--sufficiency` evaluation of it."""
    from locos_bench.interventions import only_full

    model, spec, data, _, _, measures, _, _ = setting
    common = ((1, 2), (2, 1))
    sets = [tuple(sorted((*common, h))) for h in ((0, 0), (1, 0), (2, 3), (1, 3))]
    idx = [1, 2, 4, 7, 8, 11]
    chosen = [data.evaluation[i] for i in idx]
    for heads, outcome in zip(sets, measures["sufficiency"](sets, idx, common), strict=True):
        with only_full(model.bridge, list(heads), sink=SINK, window=WINDOW):
            whole = osr.Outcome.from_rows(evaluate_task(model, spec, chosen), idx, len(data.evaluation))
        assert outcome.metric == whole.metric
        torch.testing.assert_close(torch.tensor([outcome.gold[i] for i in idx]), torch.tensor([whole.gold[i] for i in idx]),
                                   rtol=1e-5, atol=1e-5)
    with pytest.raises(LocosError, match="must hold L1H2\\+L2H1 and one head more"):
        measures["sufficiency"]([common], idx, common)


def test_an_exhaustive_step_chooses_the_best_of_every_set_on_each_fit_half(setting):
    """`exhaustive_to=2`: every pair is measured on every example, each fold's set of 2 is the
    best pair on its own fit half, and the greedy growth to 3 starts from it."""
    model, measures, items, measure_base = setting[0], setting[5], setting[6], setting[7]
    store = osr.SetStore(None, {})
    heads = all_heads(model)[:8]  # 28 pairs: the rule, not the planted model's answer, is under test
    result = osr.search(heads, items, {"necessity": measures["necessity"]}, measure_base, k_max=3, prune=4,
                        store=store, exhaustive_to=2)  # sufficiency's exhaustive step is the same code
    base = store.get("unablated", ())
    pairs = list(itertools.combinations(sorted(heads), 2))
    every = range(len(items))
    for mode in ["necessity"]:
        assert result[mode]["exhaustive_to"] == 2
        assert all(store.get(mode, p) is not None and None not in store.get(mode, p).gold for p in pairs)
        for fold in result[mode]["folds"]:
            values = [osr.effect(mode, base, store.get(mode, p), "gold", fold["fit"]) for p in pairs]
            assert fold["path"][1] == set_name(pairs[values.index(max(values))])
            assert set(fold["path"][1].split("+")) < set(fold["path"][2].split("+"))
        ranked = result[mode]["ranked"]["2"]
        by_all = sorted(pairs, key=lambda p: -osr.effect(mode, base, store.get(mode, p), "gold", every))
        assert [r[0] for r in ranked] == [set_name(p) for p in by_all[:osr.RANKED]]
        # the shipped file keeps the chosen paths, not every pair
        assert set(result[mode]["sets"]) <= {name for fold in result[mode]["folds"] for name in fold["path"]}


def test_exhaustive_to_past_k_max_is_refused(setting):
    with pytest.raises(LocosError, match="exhaustive_to must be 1..k_max"):
        _search(setting, exhaustive_to=4)


def test_an_expert_search_names_experts_and_measures_as_an_expert_run_ablates(organism_moe):
    """On the MoE organism: sets of experts, named L0E1, each outcome the task evaluated with
    those experts mean-ablated (necessity) or alone kept (sufficiency)."""
    from locos_bench.evaluation.expert_oracle import every_expert, expert_measure
    from locos_bench.interventions.experts import expert_ablation, expert_means

    spec = load_task("organism-nonliteral")
    data = build_task_data(spec, SplitSizes(n_calib=2, n_ref=8, n_eval=8), organism_moe)
    means = expert_means(organism_moe, [t.input_ids for t in data.tokenized(organism_moe, "reference")])
    experts = every_expert(organism_moe)
    assert len(experts) == 32
    measures = {"necessity": expert_measure(organism_moe, spec, data.evaluation, means, mode="mean"),
                "sufficiency": expert_measure(organism_moe, spec, data.evaluation, means, mode="mean", keep=True)}
    base = lambda: osr.Outcome.from_rows(evaluate_task(organism_moe, spec, data.evaluation))  # noqa: E731
    store = osr.SetStore(None, {}, unit="expert")
    result = osr.search(experts[:6], [ex.item for ex in data.evaluation], measures, base, k_max=2, prune=2,
                        store=store, exhaustive_to=2)
    assert set(result["necessity"]["singles"]) == {f"L0E{e}" for e in range(6)}
    chosen = result["necessity"]["folds"][0]["path"][1]
    assert chosen.count("E") == 2 and "H" not in chosen
    pair = [(0, int(part.split("E")[1])) for part in chosen.split("+")]
    with expert_ablation(organism_moe, pair, mode="mean", means=means):
        rows = evaluate_task(organism_moe, spec, data.evaluation)
    torch.testing.assert_close(torch.tensor(store.sets["necessity"][chosen].gold, dtype=torch.float64),
                               torch.tensor([r["gold_logprob"] for r in rows], dtype=torch.float64),
                               rtol=1e-4, atol=1e-4)
    rest = [u for u in experts if u != (0, 0)]
    with expert_ablation(organism_moe, rest, mode="mean", means=means):
        kept = evaluate_task(organism_moe, spec, data.evaluation)
    torch.testing.assert_close(torch.tensor(store.sets["sufficiency"]["L0E0"].gold, dtype=torch.float64),
                               torch.tensor([r["gold_logprob"] for r in kept], dtype=torch.float64),
                               rtol=1e-4, atol=1e-4)
    with pytest.raises(LocosError, match="only mean ablation can"):
        expert_measure(organism_moe, spec, data.evaluation, None, mode="mask", keep=True)
