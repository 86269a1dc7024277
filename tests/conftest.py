"""Shared fixtures: each real model is loaded once per test process."""

from __future__ import annotations

import os
import signal

import pytest

# A test command started in the background of a shell without job control (`cmd &`, `nohup`)
# inherits SIGINT ignored, and so would every run the Ctrl-C tests start: Python then installs
# no KeyboardInterrupt handler, the SIGINT those tests send does nothing, and the fault-injection
# test waits on a child that never stops. A handler here is reset to the default on exec, so the
# runs the tests start take SIGINT as a terminal's would.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Test files that take minutes, longest first: pytest-xdist hands files to its workers in
# collection order (`--no-loadscope-reorder`), so these start first and short files fill in.
LONG_FIRST = [
    "tests/regression/test_reference_runs.py",
    "tests/integration/test_architectures.py",
    "tests/integration/test_architectures_moe.py",
    "tests/integration/test_ray.py",
    "tests/integration/test_clean_prefix.py",
    "tests/integration/test_attention.py",
    "tests/integration/test_task_eval.py",
    "tests/integration/test_lm_eval.py",
]


def pytest_collection_modifyitems(session, config, items):
    rank = {path: i for i, path in enumerate(LONG_FIRST)}
    root = config.rootpath
    items.sort(key=lambda item: rank.get(item.path.relative_to(root).as_posix(), len(rank)))


APART = {"tests/regression/test_reference_runs.py"}
"""Files whose tests are each long enough (minutes) to be scheduled one by one, on any worker."""

TOGETHER = {path: "published-runs" for path in ("tests/regression/test_golden_leaderboard.py",
                                                 "tests/regression/test_results_pages.py",
                                                 "tests/regression/test_published_claims.py",
                                                 "tests/unit/test_separability.py")}
"""Files handed to one worker as one, so their session fixture is built once: every published
run's analysis (`published_runs`, about a minute in all)."""


def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile`, except that the tests of `APART` files are handed out one by one (the
    gemma3 and smollm2 reference runs, minutes each, run side by side instead of in turn), and
    the files of a `TOGETHER` group go to one worker together."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LoadFileLongTestsApart(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return nodeid if path in APART else TOGETHER.get(path, path)

    return LoadFileLongTestsApart(config, log)


def pytest_configure(config):
    """Under pytest-xdist each worker computes on one core: two workers on two cores, not four
    threads fighting over two."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _plugin_env_stays_in_its_test():
    """`--plugin` adds its file to `LOCOS_BENCH_PLUGINS` so the processes a run starts load it;
    in-process CLI tests would leak it into every later test's subprocesses."""
    before = os.environ.get("LOCOS_BENCH_PLUGINS")
    yield
    if before is None:
        os.environ.pop("LOCOS_BENCH_PLUGINS", None)
    else:
        os.environ["LOCOS_BENCH_PLUGINS"] = before


@pytest.fixture(scope="session")
def published_runs():
    """Published run name -> its analysed statistics (`leaderboard/<run>/`), each analysed once
    per test process: the README's and the results pages' claims read the same runs."""
    from scripts._claims import run_loader

    return run_loader()


@pytest.fixture(scope="session")
def gemma3():
    from locos_bench.models import load_model

    return load_model("gemma3")


@pytest.fixture(scope="session")
def smollm2():
    from locos_bench.models import load_model

    return load_model("smollm2")


@pytest.fixture(scope="session")
def organism_moe():
    from locos_bench.models import load_model

    return load_model("organism-moe")


@pytest.fixture(scope="session")
def planted():
    from locos_bench.models import load_model

    return load_model("planted")


@pytest.fixture(scope="session")
def planted_nonliteral():
    from locos_bench.models import load_model

    return load_model("planted-nonliteral")


@pytest.fixture(params=["gemma3", "smollm2"])
def real_model(request):
    """Both embedded real models (Gemma 3 has a post-attention norm and MQA; SmolLM2 has GQA)."""
    return request.getfixturevalue(request.param)
