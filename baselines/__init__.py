"""Not code: this marker makes the folder the package `locos_bench._builtin_baselines`, which is
how the baseline files ship in the wheel and are found through `importlib.resources`
(`setup.py`, `locos_bench/_package_data.py`)."""
