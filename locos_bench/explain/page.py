"""The explain page: one self-contained HTML file per answer (`locos_bench/data/explain.html`:
inline CSS, JS and data, nothing fetched when opened), and the pages a run writes into its
directory for the leaderboard to link (`report.rendering.links` reads them from the files).
One template draws either unit: heads (`attribution.Explanation`) or a mixture of experts'
experts (`experts.ExpertExplanation`, whose data says `"unit": "expert"`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from locos_bench.errors import LocosError
from locos_bench.explain.attribution import Explanation, explain
from locos_bench.explain.experts import ExpertExplanation
from locos_bench.models import LoadedModel

DATA_MARK = "/*__EXPLAIN_DATA__*/null"


def render_html(explanation: Explanation | ExpertExplanation) -> str:
    """One self-contained page: the template with the explanation's JSON inlined. When another
    detector than LOCOS (on experts, `expert-locos`) chose the top units, a second script
    (`data/explain-detector.js`) says so on the page; a LOCOS page is the template alone."""
    data_files = resources.files("locos_bench").joinpath("data")
    template = data_files.joinpath("explain.html").read_text(encoding="utf-8")
    data = json.dumps(explanation.to_json(), ensure_ascii=True, allow_nan=False)
    # Inside <script>, "</" would end the element; "<\/" is the same string to JSON.
    data = data.replace("</", "<\\/")
    title = f"{explanation.example.task}[{explanation.example.index}] on {explanation.model}"
    if explanation.detector is not None:
        units = "experts" if isinstance(explanation, ExpertExplanation) else "heads"
        title += f", top {units} by {explanation.detector['name']}"
        script = data_files.joinpath("explain-detector.js").read_text(encoding="utf-8")
        template = template.replace("\n</body>", f"\n<script>\n{script}</script>\n</body>")
    import html

    return template.replace("__EXPLAIN_TITLE__", html.escape(title)).replace(DATA_MARK, data)


def write_page(explanation: Explanation | ExpertExplanation, path: Path | str) -> Path:
    """Write the page atomically (no half-written file on failure)."""
    from locos_bench.run.rundir import write_atomic

    path = Path(path)
    write_atomic(path, render_html(explanation))
    return path


def page_data(html_text: str) -> dict[str, Any]:
    """The JSON a page embeds (for tests and tools reading pages back)."""
    start = html_text.find('<script id="explain-data" type="application/json">')
    if start < 0:
        raise LocosError("not an explain page: no embedded data")
    start = html_text.index(">", start) + 1
    end = html_text.index("</script>", start)
    return json.loads(html_text[start:end])


PAGES_DIR = "explain"
"""The run directory's folder of explain pages (the leaderboard links them: `report.rendering.links`)."""


def write_run_pages(model: LoadedModel, run_dir: Path | str, tasks: Sequence[Any], n: int, *, top: int = 5,
                    sufficiency: Any = None, ablation: Any = "mean", unit: str = "head") -> list[Path]:
    """Explain pages for the first `n` evaluation examples of each retrieval task of a run.

    Each page ablates with the run's ablation over the run's own reference split and judges
    answers by the task's headline metric. A page that exists is kept (a resumed run does not redo it); an example
    that cannot be explained warns and is skipped.

    Args:
        tasks: The run's `splits.TaskData` (spec, reference and evaluation examples).
        sufficiency: The run's `Manifest.sufficiency` (`run.manifest.Streaming`): the pages' streaming
            heads keep its sink and window; None: the defaults (`KV_SINK`, `KV_WINDOW`).
        ablation: The run's ablation (`interventions.AblationSpec` or its name).
        unit: The run's unit: an expert run's pages explain experts (`explain_experts`, its
            ablation's mode; sufficiency keeps the top experts alone).
    """
    import warnings

    from locos_bench.explain.attribution import KV_SINK, KV_WINDOW, headline_metric

    sink, window = (KV_SINK, KV_WINDOW) if sufficiency is None else (sufficiency.sink, sufficiency.window)

    out = []
    for data in tasks:
        if data.spec.kind != "retrieval":
            continue
        for example in data.evaluation[:n]:
            path = Path(run_dir) / PAGES_DIR / f"{example.task}-{example.index}.html"
            if not path.exists():
                try:
                    if unit == "expert":
                        from locos_bench.explain.experts import explain_experts
                        from locos_bench.interventions.experts import expert_shape

                        n_units = expert_shape(model)[0] * expert_shape(model)[1]
                        result = explain_experts(model, example, top=min(top, n_units), reference=data.reference,
                                                 ablation=getattr(ablation, "mode", ablation),
                                                 max_new_tokens=data.spec.max_new_tokens,
                                                 metric=headline_metric(data.spec))
                    else:
                        result = explain(model, example, top=min(top, model.geometry.n_total_heads),
                                         reference=data.reference, max_new_tokens=data.spec.max_new_tokens,
                                         metric=headline_metric(data.spec), kv_sink=sink, kv_window=window,
                                         ablation=ablation)
                except LocosError as exc:
                    warnings.warn(f"no explain page for {example.task}[{example.index}]: {exc}", stacklevel=2)
                    continue
                write_page(result, path)
            out.append(path)
    return out
