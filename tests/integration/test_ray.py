"""The Ray executor on a real local Ray cluster (this machine only) and the planted model.

One cluster (2 CPUs, loopback only) serves the module. Its workers register the test-only
detectors of `_ray_detectors` through Ray's `worker_process_setup_hook`.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import _ray_detectors
import pytest

from locos_bench import cli
from locos_bench.errors import LocosError
from locos_bench.harness.driver import Run
from locos_bench.harness.progress import Progress
from locos_bench.run import RunConfig, RunDir, ScoresUnit

HERE = Path(__file__).resolve().parent

if os.environ.get("CI"):  # CI installs the test extra: Ray must be there
    import ray
else:
    ray = pytest.importorskip("ray", reason="the Ray executor's tests need pip install 'locos-bench[ray]'")


@pytest.fixture(scope="module")
def markers(tmp_path_factory):
    return tmp_path_factory.mktemp("markers")


@pytest.fixture(scope="module")
def cluster(markers):
    """A local Ray instance bound to the loopback address, shut down after the module."""
    _ray_detectors.register()
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1",
             object_store_memory=100 * 1024**2,
             runtime_env={"env_vars": {"PYTHONPATH": path, _ray_detectors.MARKERS: str(markers),
                                       "OMP_NUM_THREADS": "1"},
                          "worker_process_setup_hook": "_ray_detectors.register"})
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()
    _ray_detectors.unregister()


def _cfg(out, detectors, **kw):
    base = dict(model="planted", detectors=[detectors], budgets=[1, 2], n_calib=2, n_ref=4, n_eval=6,
                random_draws=2, rank_diagnostic=2, output_dir=out, quiet=True)
    base.update(kw)
    return RunConfig(**base).resolved()


def _units(run_dir):
    """Every unit by key, timing left out; the keys must be unique in the file."""
    units = RunDir(run_dir).read_units()
    lines = [line for line in (Path(run_dir) / "results.jsonl").read_text().splitlines() if line.strip()]
    assert len(lines) == len(units), "a unit was recorded twice"
    return {u.key: u.model_dump(exclude={"seconds"}) for u in units}


@pytest.mark.slow
def test_ray_records_equal_local_records_unit_for_unit(tmp_path, cluster, planted):
    from locos_bench.harness.executors import RayExecutor

    detectors = "locos,attention,random,test-ray-crash"
    local = Run(_cfg(tmp_path / "local", detectors), planted, Progress(True)).execute()
    cfg = _cfg(tmp_path / "ray", detectors)
    with RayExecutor(cfg, workers=2) as executor:
        remote = Run(cfg, planted, Progress(True), executor=executor).execute()
        assert executor.deaths == 0
    a, b = _units(local.path), _units(remote.path)
    assert a.keys() == b.keys() and len(a) > 10
    assert [k for k in a if a[k] != b[k]] == []
    crash = b[ScoresUnit(task="planted-kv", detector="test-ray-crash").key]
    assert "boom" in crash["error"]  # a detector's own failure: recorded as locally, the run went on


@pytest.mark.slow
def test_killed_worker_has_its_job_retried_and_every_unit_is_recorded_once(tmp_path, cluster, markers, planted):
    """SIGKILL the worker in the middle of a job; a worker that always dies exhausts its retries."""
    from locos_bench.harness.executors import RayExecutor

    cfg = _cfg(tmp_path / "ray", "test-ray-slow,test-ray-suicide,locos", budgets=[1], rank_diagnostic=1)
    killed = []

    def kill_first_slow_job():
        deadline = time.time() + 120
        while time.time() < deadline and not list(markers.iterdir()):
            time.sleep(0.05)
        for marker in markers.iterdir():
            pid = int(marker.read_text())
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            return

    killer = threading.Thread(target=kill_first_slow_job, daemon=True)
    killer.start()
    with RayExecutor(cfg, workers=1, max_retries=1) as executor:
        run_dir = Run(cfg, planted, Progress(True), executor=executor).execute()
        deaths = executor.deaths
    killer.join(5)
    assert len(killed) == 1
    assert len(list(markers.iterdir())) == 2  # the killed job ran again, on another (fresh) worker
    assert deaths == 1 + 2  # the slow job's worker once; the suicidal detector's twice (1 retry)
    units = _units(run_dir.path)
    slow = units[ScoresUnit(task="planted-kv", detector="test-ray-slow").key]
    assert slow["error"] is None and slow["scores"]
    lost = units[ScoresUnit(task="planted-kv", detector="test-ray-suicide").key]
    assert lost["error"].startswith("worker died 2 time(s)")
    from locos_bench.run import load_run

    load_run(run_dir.path)  # complete: every unit the plan needs is there


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_killed_driver_resumes_with_the_same_command(tmp_path, cluster):
    """SIGKILL the driver (a CLI process on the cluster) mid-run, rerun the same command."""
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "locos_bench.cli", "run", "--model", "planted", "--detector", "locos,random",
           "--budgets", "2,4", "--n-calib", "2", "--n-ref", "4", "--n-eval", "6", "--random-draws", "3",
           "--rank-diagnostic", "2", "--output-dir", str(out), "--quiet",
           "--executor", "ray", "--address", cluster, "--workers", "1"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    results = out / "results.jsonl"
    deadline = time.time() + 150
    while time.time() < deadline and proc.poll() is None:
        if results.exists() and results.read_text().count("\n") >= 5:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = RunDir(out).read_units()
    assert before, "the driver was killed before finishing any unit"
    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    after = _units(out)
    assert len(after) > len(before)
    assert all(after[u.key] == u.model_dump(exclude={"seconds"}) for u in before)  # kept, not recomputed
    assert (out / "leaderboard.md").exists()


# -- bad input, one line each ------------------------------------------------------------------


def _cli_error(capsys, argv):
    code = cli.main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    return err


RUN = ["run", "--model", "planted", "--detector", "locos", "--budgets", "1", "--n-calib", "2",
       "--n-ref", "2", "--n-eval", "2", "--quiet"]


def test_ray_not_installed_says_how_to_install(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as if absent
    err = _cli_error(capsys, [*RUN, "--output-dir", str(tmp_path / "r"), "--executor", "ray"])
    assert "not installed" in err and "pip install 'locos-bench[ray]'" in err


def test_unreachable_address_fails_fast(tmp_path, capsys):
    port = _free_port()
    start = time.perf_counter()
    err = _cli_error(capsys, [*RUN, "--output-dir", str(tmp_path / "r"), "--executor", "ray",
                              "--address", f"127.0.0.1:{port}"])
    assert f"cannot reach a Ray cluster at 127.0.0.1:{port}" in err
    assert time.perf_counter() - start < 30
    assert "HOST:PORT" in _cli_error(capsys, [*RUN, "--executor", "ray", "--address", "nowhere"])


def test_more_gpus_per_worker_than_the_cluster_has(tmp_path, capsys, cluster):
    err = _cli_error(capsys, [*RUN, "--output-dir", str(tmp_path / "r"), "--executor", "ray",
                              "--gpus-per-worker", "1"])
    assert "--gpus-per-worker 1 is more than the Ray cluster's 0 GPU(s)" in err
    assert ray.is_initialized()  # the module's connection is kept


def test_ray_options_without_ray_executor(tmp_path, capsys):
    err = _cli_error(capsys, [*RUN, "--output-dir", str(tmp_path / "r"), "--workers", "2"])
    assert "--workers only apply with --executor ray" in err


def test_bad_worker_count(cluster):
    from locos_bench.harness.executors import RayExecutor

    with pytest.raises(LocosError, match="--workers must be at least 1"):
        RayExecutor(_cfg(None, "locos"), workers=0)
    with pytest.raises(LocosError, match="--workers 3 do not fit: the Ray cluster has room for 2 worker"):
        RayExecutor(_cfg(None, "locos"), workers=3)
