"""lm-eval's non-public doors (verified on lm-eval 0.4.13).

`locos-bench lm-eval ARGS` hands ARGS to lm-eval's own command line, which lm-eval exposes only
as its `lm-eval` console script: it is reached here through that script's entry point, not by
importing `lm_eval.__main__`. `LocosLM` subclasses the public `TemplateLM` and defines
`_loglikelihood_tokens`, the one abstract method lm-eval makes a subclass define under a
private name (`check` verifies it still does). Task files are read through the public
`TaskManager` (`lm_eval.taskfiles` rewrites their paths), with no patch on lm-eval's classes.

`check` raises one `LocosError` line when lm-eval is missing or outside `VERIFIED`.
"""

from __future__ import annotations

import sys
from importlib import metadata

from locos_bench._compat import gone, verified_version
from locos_bench.errors import LocosError

DIST = "lm-eval"
VERIFIED = ">=0.4.13,<0.5"
"""lm-eval versions the integration is tested against (the CI installs 0.4.13)."""

PRIVATE_NAMES: tuple[str, ...] = ()
"""lm-eval private names locos-bench reads (`tests/unit/test_private_apis.py`): none."""

SUBCLASS_HOOKS = ("_loglikelihood_tokens",)
"""Private names lm-eval makes a `TemplateLM` subclass define (`LocosLM` does)."""


def check(version: str | None = None) -> str:
    """The installed lm-eval version (or `version`), or a `LocosError` naming the supported range."""
    return verified_version(DIST, VERIFIED, version=version, install=f"'locos-bench[lm-eval]' (lm-eval{VERIFIED})",
                            module="lm_eval")


def check_subclass_hooks() -> None:
    """`TemplateLM` still asks a subclass for each of `SUBCLASS_HOOKS`."""
    from lm_eval.api.model import TemplateLM

    for name in SUBCLASS_HOOKS:
        if name not in TemplateLM.__abstractmethods__:
            raise gone(DIST, name, "TemplateLM (abstract)")


def run_cli(argv: list[str]) -> None:
    """Run lm-eval's command line (`lm-eval ARGV...`) in this process; it exits with SystemExit
    on a usage error, as the script does."""
    check()
    scripts = [ep for ep in metadata.entry_points(group="console_scripts", name="lm-eval")
               if ep.dist is None or ep.dist.name.replace("_", "-").lower() == DIST]
    if not scripts:
        raise LocosError("lm-eval declares no `lm-eval` command: reinstall it (pip install 'locos-bench[lm-eval]')")
    main = scripts[0].load()
    saved = sys.argv
    sys.argv = ["lm-eval", *argv]
    try:
        main()
    finally:
        sys.argv = saved
