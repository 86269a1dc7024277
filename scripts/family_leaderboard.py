"""The organism family's leaderboard (the documented equivalent of a `--model organism-family`
run): every detector on every member, read against each member's ground truth.

    .venv/bin/python scripts/family_leaderboard.py [--members organism,organism-nodrop,...]
        [--runs-dir runs/family] [--out leaderboard/organism-family]

Per member it runs `locos-bench run --model MEMBER --detector all,qrhead,eap-ig --budgets 1,2,3 --n-calib 16
--n-ref 32 --n-eval 64` into `--runs-dir`/MEMBER (a rerun resumes it, as runs do), then reads
each detector's top k against the member's `ground_truth.json` (`report.statistics.family`:
cross-fitted, with intervals over members and items). A member that fails to load or run is
named in the leaderboard, and the others still run. Writes `README.md` and `family.json` to
`--out`, and prints its time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from locos_bench.errors import LocosError  # noqa: E402
from locos_bench.models.organism import FAMILY, ORGANISM_TASKS  # noqa: E402

RUN_ARGS = ["--detector", "all,qrhead,eap-ig", "--budgets", "1,2,3", "--n-calib", "16", "--n-ref", "32", "--n-eval", "64"]


def run_member(member: str, runs_dir: Path, resume: bool = True) -> Path:
    """The member's run directory, after running (or resuming) its run; with `resume` False, the
    run already there, unresumed."""
    from locos_bench.cli import main as cli
    from locos_bench.models.organism import checked_weights, member_dir

    checked_weights(member_dir(member))  # a missing or changed file: its one line names it
    out = runs_dir / member
    if not resume:
        if not (out / "manifest.json").is_file():
            raise LocosError(f"no run of {member} in {runs_dir} (run without --no-run)")
        return out
    code = cli(["run", "--model", member, *RUN_ARGS, "--output-dir", str(out)])
    if code != 0:
        raise LocosError(f"locos-bench run --model {member} exited {code}")
    return out


def read_member(member: str, run: Path) -> Any:
    """A `family.Member` from a run directory and the ground truth its manifest recorded."""
    import numpy as np

    from locos_bench.report.statistics.analysis import _scores
    from locos_bench.run.plan import RunPlan
    from locos_bench.run.rundir import RunDir

    rundir = RunDir(run)
    manifest = rundir.read_manifest()
    if not manifest.model_info.get("oracle"):
        raise LocosError(f"{member} has no ground truth (run scripts/organism_ground_truth.py --member {member})")
    plan = RunPlan.from_manifest(manifest)
    done = {u.key: u for u in rundir.read_units()}
    scores = {task: {det: [np.asarray(g, dtype=np.float64).tolist() for g in grids] for det, grids in by_det.items()}
              for task, by_det in _scores(plan, manifest, done).items()}
    return member_from(member, scores, manifest.tie_seed, manifest.model_info.get("oracle_sha256"))


def member_from(member: str, scores: dict[str, Any], tie_seed: int | None, sha256: str | None) -> Any:
    """A `family.Member` from its detectors' recorded scores and its shipped ground truth
    (refused if it changed since the scores were recorded beside it)."""
    from locos_bench.models.organism import GROUND_TRUTH, member_dir
    from locos_bench.report.statistics.family import Member
    from locos_bench.report.statistics.oracle import read_ground_truth

    truth = read_ground_truth(member_dir(member) / GROUND_TRUTH, sha256)
    for task, split in truth.get("splits", {}).items():
        split.setdefault("items", _items(task, split["evaluation"]))
    return Member(name=member, truth=truth, scores=scores, tie_seed=tie_seed, sha256=sha256)


def _items(task: str, indices: list[int]) -> list[str]:
    """The items of a task's examples by index (a ground truth written before it recorded them:
    the examples are rebuilt from the task's deterministic stream)."""
    from locos_bench.tasks import load_task, make_examples

    examples = make_examples(load_task(task), max(indices) + 1)
    return [examples[i].item for i in indices]


def _est(e: Any, counted: int | None = None, of: int | None = None) -> str:
    if e is None:
        return "n/a"
    return f"{e.value:.2f} [{e.low:.2f}, {e.high:.2f}]" + (f" ({counted} of {of})" if counted is not None and counted < of else "")


def render(rows: list[Any], names: list[str], partings: list[Any], failed: dict[str, str], seconds: float,
           specific: dict[str, Any] | None = None) -> str:
    """The leaderboard's Markdown."""
    lines = ["# The organism family against its oracles", "",
             f"Members read: {', '.join(f'`{m}`' for m in names)}" + (
                 f"; failed: {', '.join(f'`{m}` ({why})' for m, why in failed.items())}" if failed else "") + ".",
             "", "Share of the cross-fitted oracle's effect (mean over members; 95% interval over members and "
             "items; a member whose oracle's effect is under 0.05 is left out, and the count says so), and head-level "
             "AUROC for the 3 heads of largest single-head effect on the gold log-prob (interval over members):", "",
             *share_table(rows, len(names)), "", "## Where reading and writing part ways", "", *parting_lines(partings),
             "", "## Specific to retrieval?", "", *specificity_lines(specific or {}),
             "", f"Family leaderboard built in {seconds:.0f} s (`scripts/family_leaderboard.py`)."]
    return "\n".join(lines) + "\n"


def share_table(rows: list[Any], n_members: int) -> list[str]:
    """Every detector's family share per view and k, and its AUROC per view."""
    from locos_bench.report.statistics.family import VIEWS

    views = [v for v in VIEWS if rows and v in rows[0].share]
    lines = ["| detector | " + " | ".join(f"{v}, k = {k}" for v in views for k in (1, 2, 3))
             + "".join(f" | AUROC, {v}" for v in views) + " |", "|---" * (1 + 4 * len(views)) + "|"]
    for r in sorted(rows, key=lambda r: -(r.share["kept"][3].value if r.share.get("kept", {}).get(3) else -9)):
        lines.append(f"| `{r.detector}` | " + " | ".join(_est(r.share[v][k], r.counted[v][k], n_members)
                                                         for v in views for k in (1, 2, 3))
                     + "".join(f" | {_est(r.auroc[v])}" for v in views) + " |")
    return lines


SPECIFIC = 0.05
"""A necessary set is specific to retrieval when it moves the control task's metric by at most this."""


def specificity_lines(specific: dict[str, Any]) -> list[str]:
    """Per member and ablation: how many of the best necessity sets (per kind and k) leave the
    control task within `SPECIFIC`, and the ones that do not."""
    if not any(specific.values()):
        return ["No member's ground truth searched a control task."]
    lines = ["The best necessity set of each kind at each k, ablated on the control task `organism-facts` "
             f"(a fact the weights hold, no story): specific when the control moves by at most {SPECIFIC}.", ""]
    for name, by_ablation in specific.items():
        for ablation, tasks in by_ablation.items():
            cells = [(task, k, c) for task, by_k in tasks.items() for k, c in by_k.items()]
            off = [f"{task} k = {k} ({c['set']}: control drop {c['control_drop']:.3f})" for task, k, c in cells
                   if c["control_drop"] > SPECIFIC]
            lines.append(f"- `{name}`, `{ablation}`: {len(cells) - len(off)} of {len(cells)} specific"
                         + (f"; not: {'; '.join(off)}" if off else ""))
    return lines


WRITE_SIDE = ("locos", "locos-argmax", "dla")
READ_SIDE = ("attention", "retrieval-head", "qrhead", "headkv")


def parting_lines(found: list[Any]) -> list[str]:
    """Per member and kind whose ground truth parts reading from writing: its heads, and per
    detector how many of them its top 3 holds; then the answer to the family's question."""
    if not found:
        return ["No member's ground truth shows a read-only or a write-without-reading head "
                "(`models.organism.dissociation`), so the family cannot answer whether the write-side score "
                "finds the writing heads where reading and writing part ways."]
    lines = [f"- `{p.member}`, {p.task}: read-only {', '.join(p.read_only) or 'none'}; "
             f"write-without-reading {', '.join(p.writers) or 'none'}" for p in found]
    detectors = sorted({d for p in found for d in p.ranks})
    count = {d: {kind: (sum(p.ranks[d][h] <= 3 for p in found if d in p.ranks for h in getattr(p, kind)),
                        sum(len(getattr(p, kind)) for p in found if d in p.ranks)) for kind in ("writers", "read_only")}
             for d in detectors}
    lines += ["", "| detector | writers in its top 3 | read-only heads in its top 3 |", "|---|---|---|"]
    lines += [f"| `{d}` | {count[d]['writers'][0]} of {count[d]['writers'][1]} | "
              f"{count[d]['read_only'][0]} of {count[d]['read_only'][1]} |" for d in detectors]

    def side(names: tuple[str, ...], kind: str) -> str:
        return ", ".join(f"`{d}` {count[d][kind][0]} of {count[d][kind][1]}" for d in names if d in count) or "none ran"

    lines += ["", f"**The answer, from these ground truths.** Write-without-reading heads in the top 3: "
              f"write-side {side(WRITE_SIDE, 'writers')}; read-side {side(READ_SIDE, 'writers')}. Read-only heads "
              f"in the top 3: read-side {side(READ_SIDE, 'read_only')}; write-side {side(WRITE_SIDE, 'read_only')}."]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--members", default=",".join(FAMILY))
    parser.add_argument("--runs-dir", type=Path, default=ROOT / "runs" / "family")
    parser.add_argument("--out", type=Path, default=ROOT / "leaderboard" / "organism-family")
    parser.add_argument("--no-run", action="store_true",
                        help="read the runs already in --runs-dir without resuming them (their files still checked)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    members, failed = {}, {}
    for member in [m for m in args.members.split(",") if m]:
        try:
            if member not in FAMILY:
                raise LocosError(f"not a member of the organism family ({', '.join(FAMILY)})")
            run = run_member(member, args.runs_dir, resume=not args.no_run)
            members[member] = read_member(member, run)
        except (LocosError, OSError, ValueError) as exc:
            failed[member] = str(exc).splitlines()[0]
            print(f"{member}: {failed[member]}", file=sys.stderr)
    if not members:
        print("error: no member of the family could be read", file=sys.stderr)
        return 2
    scores = {n: {"scores": m.scores, "tie_seed": m.tie_seed, "ground_truth_sha256": m.sha256} for n, m in members.items()}
    built = build(members)
    seconds = time.perf_counter() - started
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"members": scores, "failed": failed, "seconds": round(seconds, 1), "specificity": built["specificity"],
              "rows": [r.model_dump() for r in built["rows"]], "partings": [p.model_dump() for p in built["partings"]]}
    (args.out / "family.json").write_text(json.dumps(record, separators=(",", ":"), sort_keys=True) + "\n")
    (args.out / "README.md").write_text(render_record(record))
    print(f"wrote {args.out} in {seconds:.0f} s")
    return 0


def build(members: dict[str, Any], n_resamples: int | None = None) -> dict[str, Any]:
    """The family's rows and partings from its members (scores and ground truths); fewer
    `n_resamples` give the same point figures, faster."""
    from locos_bench.report.statistics.family import family_rows, member_rows, partings

    per_member = {name: [row for task in ORGANISM_TASKS if task in m.truth["tasks"] for row in member_rows(m, task)]
                  for name, m in members.items()}
    from locos_bench.models.organism import specificity

    rows = family_rows(per_member) if n_resamples is None else family_rows(per_member, n_resamples=n_resamples)
    return {"rows": rows, "partings": [p for m in members.values() for p in partings(m, ORGANISM_TASKS)],
            "specificity": {name: specificity(m.truth) for name, m in members.items()}}


def rebuild(record: dict[str, Any], n_resamples: int | None = None) -> dict[str, Any]:
    """`build` again from a `family.json`'s recorded scores and the shipped ground truths."""
    return build({n: member_from(n, m["scores"], m["tie_seed"], m["ground_truth_sha256"])
                  for n, m in record["members"].items()}, n_resamples)


def render_record(record: dict[str, Any]) -> str:
    """The leaderboard's Markdown from a `family.json` record."""
    from locos_bench.report.statistics.family import FamilyRow, Parting

    return render([FamilyRow.model_validate(r) for r in record["rows"]], list(record["members"]),
                  [Parting.model_validate(p) for p in record["partings"]], record["failed"], record["seconds"],
                  record.get("specificity", {}))


if __name__ == "__main__":
    sys.exit(main())
