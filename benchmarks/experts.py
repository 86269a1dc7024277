"""Expert detection's cost per calibration example, as a ratio to a plain forward, measured in
this one run (issue #52's goal: at most 1.3x for the one-pass expert detectors).

    python benchmarks/experts.py [--arch mixtral,qwen3-moe,olmoe,gpt-oss] [--repeats 5] [--examples 2]

On each mixture-of-experts miniature (`locos_bench.models.miniature`, random weights: cost does
not depend on their values), one kv-retrieval calibration example at a time: a plain forward of
the prompt and gold answer (transformers' own experts implementation) against `expert-routing`
and `expert-locos` scoring the same example, alternately, the fastest of `--repeats` each.
Prints one `arch detector: ratio` line per figure, with the CPU.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from locos_bench.detectors import _drops, make_detector  # noqa: E402
from locos_bench.models import load_model  # noqa: E402
from locos_bench.models.miniature import miniature  # noqa: E402
from locos_bench.tasks import load_task, make_examples  # noqa: E402


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def fastest(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arch", default="mixtral,qwen3-moe,olmoe,gpt-oss")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--examples", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"# {cpu_name()}, {args.threads} thread(s), torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        for arch in args.arch.split(","):
            model = load_model(str(miniature(arch, Path(tmp) / arch)))
            examples = make_examples(load_task("kv-retrieval"), args.examples, model=model)
            preps = _drops.prepare(model, examples, "bench", answer_tokens="mean", corrupt=False)
            hf = model.bridge.original_model
            tokens = np.mean([len(p.ids) for p in preps])

            def plain() -> None:
                with torch.no_grad():
                    for prep in preps:
                        hf(prep.ids[None])

            for name in ("expert-routing", "expert-locos"):
                detector = make_detector(name)
                rng = np.random.default_rng(0)
                times = {"plain": float("inf"), name: float("inf")}
                for _ in range(args.repeats):  # alternately, so drift hits both sides alike
                    times["plain"] = min(times["plain"], fastest(plain, 1))
                    times[name] = min(times[name], fastest(lambda: detector.score(model, examples, rng=rng), 1))
                print(f"{arch} {name}: {times[name] / times['plain']:.2f}x a plain forward "
                      f"({times[name] / len(preps) * 1e3:.1f} ms vs {times['plain'] / len(preps) * 1e3:.1f} ms "
                      f"an example of {tokens:.0f} tokens)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
