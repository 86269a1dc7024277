"""Code that needs an optional extra says in one line which extra installs it.

Each case runs the CLI in a fresh interpreter with the package hidden (`sys.modules[name] =
None` makes `import name` fail as if it were not installed): in this test process lm-eval
and Ray may already be imported, which would hide the failure.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLANTED = ["run", "--model", "planted", "--detector", "locos", "--budgets", "1", "--n-calib", "2", "--n-ref", "2",
           "--n-eval", "2", "--quiet"]
SCRIPT = """
import contextlib, io, json, sys
sys.modules["lm_eval"] = sys.modules["ray"] = None
from locos_bench.cli import main
out = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(argv)
    out.append([code, err.getvalue()])
print(json.dumps(out))
"""


def test_missing_extras_are_one_line_naming_the_extra(tmp_path):
    cases = [  # (the extra, a command that needs it)
        ("lm-eval", ["lm-eval", "run", "--model", "locos", "--tasks", "arc_easy"]),
        ("lm-eval", [*PLANTED, "--output-dir", str(tmp_path / "a"), "--lm-eval-tasks", "arc_easy"]),
        ("ray", [*PLANTED, "--output-dir", str(tmp_path / "b"), "--executor", "ray"]),
    ]
    done = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps([argv for _, argv in cases])], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for (extra, _), (code, err) in zip(cases, json.loads(done.stdout.splitlines()[-1]), strict=True):
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "not installed" in err and f"pip install 'locos-bench[{extra}]'" in err, err
