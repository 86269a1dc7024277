"""A detector file for `--plugin` (tests/unit/test_detectors_cli.py, test_explain_detector.py)."""

import torch

from locos_bench import OnePassDetector, heads, register_detector


@register_detector("file-attention")
class FileAttention(OnePassDetector):
    """Attention from the first answer position onto the needle."""

    cost = "1"

    def score_example(self, model, example, cache):
        q = example.answer_positions[:1]
        rows = [heads.attention_rows(model, cache, layer, q)[:, 0] for layer in range(model.geometry.n_layers)]
        return torch.stack([r[:, example.needle_positions].mean(-1) for r in rows])
