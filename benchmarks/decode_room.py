"""Greedy decoding steps with room left in the KV cache (`_compat.transformers.with_room`)
against transformers' concatenating cache, in one process: a batch of the default run's
decoding shape (16 rows: `eval_head_sets` 4 x `batch_size` 4 of kv-retrieval's evaluation
prompts, left-padded), prefilled once, then decoded `--steps` steps each way from a copy of the
same cache, the two ways alternating first over `--repeats`. Prints each way's seconds per step
(the faster repeat), their ratio and whether every step's logits are the same (they must be:
the same values in the same order, bit for bit).

    python benchmarks/decode_room.py
    python benchmarks/decode_room.py --steps 16 --repeats 5
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import _cpu  # noqa: E402  (the machine)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="gemma3")
    parser.add_argument("--task", default="kv-retrieval")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if min(args.rows, args.steps, args.repeats, args.threads) < 1:
        parser.error("--rows, --steps, --repeats and --threads must be at least 1")

    import torch

    from locos_bench._compat.transformers import with_room
    from locos_bench.evaluation._batching import _left_padded, _pad_id
    from locos_bench.interventions import token_positions
    from locos_bench.models import load_model
    from locos_bench.run import RunConfig
    from locos_bench.run.splits import build_run_tasks

    torch.set_num_threads(args.threads)
    model = load_model(args.model)
    tasks = build_run_tasks(RunConfig(model=args.model).resolved().for_model(model), model)
    if args.task not in tasks:
        parser.error(f"--task {args.task!r}: the default preset's tasks are {', '.join(tasks)}")
    items = tasks[args.task].tokenized(model, "evaluation")
    prompts = [items[i % len(items)].input_ids[: items[i % len(items)].prompt_len] for i in range(args.rows)]
    ids, mask, positions = _left_padded(prompts, _pad_id(model.tokenizer), "cpu")
    bridge = model.bridge

    def decode(cache, logits, room):
        out, m, p = [], mask, positions
        if room:
            with_room(cache, args.steps)
        start = time.perf_counter()
        for _ in range(args.steps):
            m, p = torch.cat([m, torch.ones_like(m[:, :1])], dim=1), p[:, -1:] + 1
            with token_positions(p):
                logits, cache = bridge(logits[:, -1].argmax(-1)[:, None], attention_mask=m, position_ids=p,
                                       past_key_values=cache, return_type="logits_and_cache", logits_to_keep=1)
            out.append(logits)
        return (time.perf_counter() - start) / args.steps, out

    with torch.inference_mode():
        with token_positions(positions):
            logits, cache = bridge(ids, attention_mask=mask, position_ids=positions,
                                   return_type="logits_and_cache", logits_to_keep=1)
        best = {False: float("inf"), True: float("inf")}
        same = True
        for repeat in range(args.repeats):
            got = {}
            for room in ((False, True) if repeat % 2 == 0 else (True, False)):
                seconds, got[room] = decode(copy.deepcopy(cache), logits, room)
                best[room] = min(best[room], seconds)
            same &= all(torch.equal(a, b) for a, b in zip(got[False], got[True]))
    print(f"{_cpu()}; {args.model}, {args.task}: {args.rows} rows, prompts {ids.shape[1]} tokens wide, "
          f"{args.steps} steps, best of {args.repeats}, {args.threads} threads")
    print(f"concatenating cache: {best[False]:.4f} s a step")
    print(f"cache with room:     {best[True]:.4f} s a step")
    print(f"ratio (room / concatenating): {best[True] / best[False]:.3f}; logits identical: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
