"""A plugin module that cannot be imported (a missing dependency), on purpose."""

import locos_bench_example_plugin_missing_dependency  # noqa: F401


class BrokenDetector:
    pass
