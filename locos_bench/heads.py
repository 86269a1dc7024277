"""Per-head access for detector authors: the primitives every built-in detector uses.

`from locos_bench import heads`; the functions live in `locos_bench.models.heads`.

* Running with narrow hooks: `run_and_capture` (one forward caching only the named hooks),
  `run_layer_by_layer` (each layer's captures handed on as they fire, then dropped).
* Geometry: `context_length`, `kv_head_map` (the key/value head each query head reads), `w_o`.
* Writes and directions: `head_writes` (what each head adds to the residual stream, through
  a post-attention norm's linearisation; they sum to the attention block's output) and
  `hooks_for_writes`, `attn_out_gain`, `answer_directions` (unit `u` with the final norm's
  weight applied), `unembedding`, `final_norm_gain`, `direct_logit_attribution` (sums to the
  logits).
* Attention rows: `attention_rows` (recomputed from cached rotated queries and keys, sliding
  windows included, without `[H, T, T]`) and `hooks_for_rows`.
"""

from locos_bench.models.heads import (
    answer_directions,
    attention_rows,
    attn_out_gain,
    context_length,
    direct_logit_attribution,
    final_norm_gain,
    head_writes,
    hooks_for_rows,
    hooks_for_writes,
    kv_head_map,
    run_and_capture,
    run_layer_by_layer,
    unembedding,
    w_o,
)

__all__ = [
    "answer_directions", "attention_rows", "attn_out_gain", "context_length", "direct_logit_attribution",
    "final_norm_gain", "head_writes", "hooks_for_rows", "hooks_for_writes", "kv_head_map", "run_and_capture",
    "run_layer_by_layer", "unembedding", "w_o",
]
