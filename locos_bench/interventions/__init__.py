"""Head interventions: what a run, a detector or a user does to chosen heads.

The face::

    from locos_bench.interventions import AblationSpec, HeadAblation, reference_means, only_full

Modules, one intervention each (a new one is one more module beside them):
`ablation` (mean, zero and scale ablation of a head's output `z`; `HeadSetAblation`: one head
set per batch row), `query` (mean-q and zero-q: the same hooks on a head's query, before
QK-norm and RoPE), `streaming` (streaming heads: a head sees only its sinks and a window),
`batched_heads` (attention knockout and activation patching, one head per batch row),
`experts` (a mixture of experts' expert as the unit: router masking and mean ablation); and
what they share: `means` (reference means, position-wise), `positions` (each token's position,
bound around a forward for the hooks to read).
"""

from locos_bench.interventions.ablation import DEFAULT_SINK, SINK_RULES, AblationSpec, HeadAblation, HeadSetAblation
from locos_bench.interventions.batched_heads import knockout_hooks, patch_z_hooks
from locos_bench.interventions.experts import ExpertMeans, expert_ablation, expert_means
from locos_bench.interventions.means import HeadMeans, check_positionwise_reference, reference_means
from locos_bench.interventions.positions import token_positions
from locos_bench.interventions.streaming import only_full, only_full_rows, streaming

__all__ = [
    "DEFAULT_SINK", "SINK_RULES", "AblationSpec", "ExpertMeans", "HeadAblation", "HeadMeans", "HeadSetAblation",
    "check_positionwise_reference", "expert_ablation", "expert_means", "knockout_hooks", "only_full", "only_full_rows", "patch_z_hooks", "reference_means",
    "streaming", "token_positions",
]
