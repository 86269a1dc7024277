"""Query ablation (`mean-q`, `zero-q`): a head's query replaced before it attends.

The LOCOS authors ablate a head by replacing its query, not its output: the q projection's
output for that query head, before QK-norm and the rotary embedding. Here that tensor is
`names.hook_q` (`blocks.{L}.attn.hook_q`, TransformerLens's alias of `attn.q.hook_out`, split
per query head), and the head still attends and still writes its values through `W_O`:

* `mean-q`: the head's query is its mean over the run's reference split
  (`means.reference_means` at this site), then QK-norm and RoPE at the token's own position:
  the head attends with an average query. (The authors average over calibration prompts drawn
  from their evaluation trials; the reference split is disjoint from detection and evaluation.)
* `zero-q`: the query is zero, which QK-norm keeps zero and RoPE rotates to zero, so every
  score is 0 and the head attends uniformly over the keys it may see (causal, within a
  sliding window, never a pad).

Under GQA each query head has its own slice of q, so one query head is ablated alone even
where its key/value head is shared. Keys and values are untouched, so a KV cache holds the
clean ones and each decoding step's query is replaced as it is computed.

The options of output ablation, for queries:

* `positionwise` (`mean-q` only): each position's own mean query (before RoPE) where the
  reference reaches it, the flat mean beyond (`means.HeadMeans.at`), as for `z`.
* `sink`: refused. A token at position 0 attends only to itself whatever its query (one
  visible key, weight 1), so a query ablation never moves a BOS sink, and `keep` and `mean`
  would be the same run. The flat mean still leaves out a BOS at position 0 (its query is as
  atypical as its `z`).

A pre-reshape QK-norm (OLMo 2) normalises every head's query together, so there one head's
replaced query also rescales the others' before they attend; so does the authors' hook.

The hooks are `ablation.HeadAblation`'s at this site: the same replacement formula, the
same clean prefix (an ablated pass starts at its lowest hooked layer) and the same shared
batches (`HeadSetAblation`).
"""

from __future__ import annotations

from locos_bench.errors import LocosError

QUERY_MODES = {"mean-q": "mean", "zero-q": "zero"}
"""Each query ablation and the replacement it writes (as output ablation's `mean`, `zero`)."""


def query_options(text: str, *, positionwise: bool, sink: str | None) -> bool:
    """Whether query ablation `text` (a key of `QUERY_MODES`) is position-wise; one clear
    error for an option that means nothing to it (`sink`; `positionwise` with `zero-q`)."""
    if sink is not None:
        raise LocosError(f"a sink rule (sink {sink}) does not apply to ablation {text}: a query ablation never "
                         "moves a BOS sink (position 0 attends only to itself), so leave it out")
    if positionwise and QUERY_MODES[text] != "mean":
        raise LocosError(f"position-wise means do not apply to ablation {text}: it has no means (use mean-q)")
    return positionwise
