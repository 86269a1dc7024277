"""Opening a run directory for one run: which directory the run goes to, what that directory
already holds, and what the run keeps of it.

`Opening` chooses the directory (reading only); `previous` says how the run stands to what it
holds (reading only: `--dry-run` makes the same check); `open`, under the directory's lock,
starts it, resumes or extends it, or rebuilds a lost manifest, and returns what the driver
(`harness.driver.Run`) runs from: the manifest to write, the finished units, the units still
to compute (`Opened`). What it does and finds, it says through the driver's `say`, as it goes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field

from locos_bench.errors import LocosError
from locos_bench.run.config import ResolvedConfig
from locos_bench.run.keys import UnitKey, UnitKind
from locos_bench.run.manifest import Manifest, resumed
from locos_bench.run.plan import RunPlan
from locos_bench.run.records import UnitRecord
from locos_bench.run.resume import Comparison, compare, merged, records_disagree
from locos_bench.run.rundir import DamagedManifest, RunDir

Say = Callable[[str, str], None]
"""Where the opening says what it does: (`log`, hidden under --quiet, `note` or `warn`; the line)."""


@dataclass(frozen=True)
class Found:
    """What a run directory holds for a run (`Opening.previous`).

    Attributes:
        old: Its manifest (this run's own when `rebuilt`); None: nothing to keep.
        comparison: How the run stands to `old` (`run.resume.compare`); None: nothing to keep.
        rebuilt: The directory's manifest is lost or damaged and its records agree with this
            run: what to say about it (None: it was not).
    """

    old: Manifest | None = None
    comparison: Comparison | None = None
    rebuilt: str | None = None


@dataclass
class Opened:
    """A run directory opened for a run (`Opening.open`): what the driver runs from."""

    manifest: Manifest
    """The manifest to write: this run's, with what the directory holds beyond it."""
    plan: RunPlan
    done: dict[UnitKey, UnitRecord]
    """The directory's finished units that the run keeps."""
    todo: list[UnitKey]
    """The units this command computes, in order."""
    earlier: dict[str, float] = field(default_factory=dict)
    """Seconds per phase of the directory's earlier sessions."""


class Opening:
    """One run's opening of its run directory (see the module): `dir` is the directory chosen."""

    def __init__(self, config: ResolvedConfig, manifest: Manifest, say: Say) -> None:
        self.config = config
        self.manifest = manifest
        self.say = say
        self.dir = self._choose(RunDir(config.output_dir))

    def _choose(self, default: RunDir) -> RunDir:
        """Where a run without `--output-dir` goes: its default directory when that is new or
        holds a run this one resumes or extends (`run.resume.compare`); else a directory of
        its own beside it, named by a digest of its configuration, so a second experiment
        never overwrites or blocks the first (a directory of that name that this run fits is
        taken again, so the same command resumes it)."""
        base = default.path
        if self.config.force or not self.config.default_dir or not default.exists():
            return default
        candidates = [base, *sorted(base.parent.glob(f"{base.name}-" + "[0-9a-f]" * 8))]
        fits = {}
        for path in candidates:
            try:
                fits[path] = compare(RunDir(path).read_manifest(), self.manifest)
            except LocosError:
                if path == base:
                    return default  # an unreadable manifest: `previous` says what is wrong with it
        same = [p for p, c in fits.items() if c.same]
        fitting = [p for p, c in fits.items() if c.fits]
        digest = hashlib.sha256(json.dumps(self.manifest.config_key(), sort_keys=True, default=str).encode())
        target = (same or fitting or [base.with_name(f"{base.name}-{digest.hexdigest()[:8]}")])[0]
        if target == base:
            return default
        self.say("note", f"{base} holds another run ({'; '.join(fits[base].differences)}); this run goes to {target}")
        return RunDir(target)

    def previous(self) -> Found:
        """The manifest the directory already holds and how this run stands to it: one it can
        neither resume nor extend is refused, naming what differs, unless `force`. A directory
        without a readable manifest is this run's when its records agree with this run
        (`run.resume.records_disagree`: `Found.rebuilt`); otherwise one line says what
        disagrees and how to keep them. Reads only."""
        old, damage = None, None
        try:
            old = self.dir.read_manifest() if self.dir.exists() else None
        except DamagedManifest as exc:
            damage = str(exc)
        except LocosError:
            if not self.config.force:
                raise
            return Found()
        if old is None:
            units = self.dir.valid_units() if not self.config.force else []
            if not units:
                return Found()
            what = f"{self.dir.manifest_path} is damaged" if damage else f"{self.dir.path} has no {RunDir.MANIFEST}"
            problems = records_disagree(self.manifest, units)
            if problems:
                raise LocosError(
                    f"{what} and its {len(units)} records do not fit this command ({'; '.join(problems[:3])}); rerun "
                    "the command that made them to rebuild the manifest, or give this run another --output-dir (the "
                    "records stay; --force would discard them)")
            return Found(self.manifest, Comparison(),
                         f"{what}: rebuilt from this command, which its {len(units)} records agree with")
        comparison = compare(old, self.manifest)
        if not comparison.fits and not self.config.force:
            raise LocosError(
                f"{self.dir.path} holds a run with another configuration ({'; '.join(comparison.differences)}); "
                "use another --output-dir, rerun the original command to resume it, or pass --force to overwrite")
        return Found(old, comparison)

    def open(self) -> Opened:
        """Start the directory, or resume it when it holds the same configuration, or extend it
        when this one only adds to it, keeping what it holds beyond this run; a lost manifest
        is rebuilt when the records agree (`previous`). The directory's finished units are
        kept, but a replaced detector's (and, with `retry_failed`, those recorded with an
        error), which are discarded and computed again. Writes: call it holding the
        directory's lock."""
        found = self.previous()
        opened = Opened(self.manifest, RunPlan.from_manifest(self.manifest), {}, [])
        comparison = found.comparison
        if comparison is None or not comparison.fits:
            if self.dir.exists() or self.dir.results_path.exists():
                self.dir.clear()
            opened.todo = opened.plan.todo({})
            return opened
        ours = None  # the units this command computes; None: every unit of the plan
        if found.rebuilt is not None:
            aside = self.dir.set_manifest_aside()
            where = f" (the damaged one is in {aside})" if aside else ""
            self.say("warn", f"{found.rebuilt}{where}")
        else:
            own = set(opened.plan.units()) if comparison.kept else None
            opened.manifest = resumed(merged(self.manifest, found.old), found.old)
            opened.plan = RunPlan.from_manifest(opened.manifest)  # bottom-k detectors the directory already holds
            opened.earlier = dict(found.old.timings)
            if own is not None:  # a directory that holds more than this command: its own units, and
                # evaluations of kept heads on its tasks (a kept detector's scores, a kept task's
                # examples or streaming heads are not its to make)
                tasks = {k.task for k in own}
                ours = {k for k in opened.plan.units() if k in own or (
                    k.kind != UnitKind.SCORES and k.task in tasks and (k.kind != UnitKind.SUFF or self.config.sufficiency))}
        units = self.dir.read_units(repair=True)
        if self.dir.set_aside:
            lines = ", ".join(map(str, self.dir.set_aside))
            self.say("warn", f"{len(self.dir.set_aside)} mangled line(s) of {self.dir.results_path} (line {lines}) "
                             f"set aside in {self.dir.corrupt_path}; their units are recomputed")
        if self.dir.torn_line:
            self.say("log", f"line {self.dir.torn_line} of {self.dir.results_path} is torn (a write cut short): "
                            "its unit is computed again")
        replaced = {name for name, _ in comparison.replaced}
        stale = {u.key for u in units if u.detector in replaced or (self.config.retry_failed and u.error)}
        opened.done = {u.key: u for u in units if u.key not in stale}
        unfinished = [k for k in opened.plan.missing(opened.done) if ours is not None and k not in ours]
        if unfinished:
            shown = ", ".join(opened.plan.describe(unfinished)[:4])
            raise LocosError(f"{self.dir.path} also holds {', '.join(comparison.kept)}, with {len(unfinished)} unit(s) "
                             f"not finished ({shown}): rerun the command that added them to finish them, or give this "
                             "run another --output-dir (the records stay)")
        self.dir.discard(stale)
        opened.todo = [k for k in opened.plan.todo(opened.done) if ours is None or k in ours]
        kept = ", ".join(comparison.kept)
        if comparison.same:
            self.say("log", f"resuming {self.dir.path}: {len(opened.done)} finished units kept")
            if kept:
                self.say("note", f"{self.dir.path} also holds {kept}: kept, with its records")
            if stale:
                self.say("note", f"retrying {len(stale)} failed unit(s) in {self.dir.path}")
            return opened
        changes = [f"+ {text}" for text in comparison.additions]
        changes += [f"detector {name} replaced ({why})" for name, why in comparison.replaced]
        dropped = f", {len(stale)} computed again" if stale else ""
        also = f"; it also holds {kept}: kept, with its records" if kept else ""
        self.say("note", f"extending {self.dir.path} ({'; '.join(changes)}): {len(opened.done)} finished units "
                         f"kept{dropped}{also}")
        return opened
