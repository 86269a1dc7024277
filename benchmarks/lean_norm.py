"""The lean norm's saving (`locos_bench.models.lean_norm`), as a ratio measured in this one run.

    python benchmarks/lean_norm.py [--models planted,organism,gemma3,smollm2] [--tokens 256] [--repeats 5]

For each model, one forward of a batch of 2 random prompts (`--tokens` long; the planted models
and the organism at most 64, their contexts), the unembedding at the last position only, with
the lean norms installed and with TransformerLens's own norm forward, alternately, the fastest
of `--repeats` each, on one thread. Prints one `model: lean / TransformerLens` line with the
CPU, and checks the two logits are bit-identical.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.experts import cpu_name, fastest  # noqa: E402
from locos_bench._compat import transformer_lens as tl  # noqa: E402
from locos_bench.models import lean_norm, load_model  # noqa: E402

SMALL = {"planted", "planted-nonliteral", "organism", "organism-moe"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="planted,organism,gemma3,smollm2")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    print(f"CPU: {cpu_name()}, 1 thread")
    for name in args.models.split(","):
        model = load_model(name)
        norms = [m for m in model.bridge.modules() if isinstance(tl.replaced_forward(m), lean_norm.LeanNorm)]
        tokens = min(args.tokens, 64) if name in SMALL else args.tokens
        ids = torch.randint(5, min(200, model.bridge.cfg.d_vocab), (2, tokens))

        def forward():
            with torch.inference_mode():
                return model.bridge(ids, logits_to_keep=1)

        forward()  # warm-up
        lean, plain = float("inf"), float("inf")
        for _ in range(args.repeats):
            lean = min(lean, fastest(forward, 1))
            for m in norms:
                tl.restore_forward(m)
            plain = min(plain, fastest(forward, 1))
            lean_norm.install(model.bridge)
        same = torch.equal(forward(), _plain(model.bridge, norms, forward))
        print(f"{name}: {len(norms)} norms, {tokens} tokens: lean {lean * 1e3:.1f} ms / TransformerLens "
              f"{plain * 1e3:.1f} ms = {lean / plain:.3f}x; logits bit-identical: {same}")
    return 0


def _plain(bridge, norms, forward):
    for m in norms:
        tl.restore_forward(m)
    try:
        return forward()
    finally:
        lean_norm.install(bridge)


if __name__ == "__main__":
    raise SystemExit(main())
