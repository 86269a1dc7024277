"""A head-set hook's per-call work does not grow with its (row, head) cells: the mask of which
rows ablate which heads is built once when the hooks are bound, not at every call (a decoding
step calls every layer's hook; at the paper's budgets a loop over 4 sets x 100 heads x their
rows there cost more than the step's own matrix work on a tiny-width model)."""

from __future__ import annotations

import numpy as np
import torch

from locos_bench.interventions import AblationSpec, HeadAblation, HeadSetAblation
from locos_bench.interventions.means import HeadMeans

L, H, D = 4, 32, 8


def _writes_during(fn, monkeypatch) -> int:
    calls = []
    real = torch.Tensor.__setitem__

    def counting(self, index, value):
        calls.append(index)
        return real(self, index, value)

    monkeypatch.setattr(torch.Tensor, "__setitem__", counting)
    try:
        fn()
    finally:
        monkeypatch.setattr(torch.Tensor, "__setitem__", real)
    return len(calls)


def test_a_hook_call_writes_once_whatever_its_cells(monkeypatch):
    rng = np.random.default_rng(0)
    means = HeadMeans(torch.randn(L, H, D), bos_sink=False)
    sets = [[divmod(int(i), H) for i in rng.choice(L * H, 60, replace=False)] for _ in range(4)]
    ablation = HeadSetAblation(sets, AblationSpec.parse("mean"), means)
    rows = [s for s in range(4) for _ in range(4)]
    hooks = ablation.hooks(rows)
    z = torch.randn(len(rows), 3, H, D)
    writes = [_writes_during(lambda fn=fn: fn(z, None), monkeypatch) for _, fn in hooks]
    assert writes == [1] * len(hooks)  # the ablated heads' slice; no write per (row, head) cell
    for (name, fn), layer in zip(hooks, sorted({layer for s in sets for layer, _ in s})):
        out = fn(z, None)
        for row, r in enumerate(rows):  # each row equals its own set's ablation alone
            alone = dict(HeadAblation([h for h in sets[r] if h[0] == layer], AblationSpec.parse("mean"),
                                      means).hooks())
            expected = alone[name](z[row:row + 1], None) if name in alone else z[row:row + 1]
            assert torch.equal(out[row:row + 1], expected)
