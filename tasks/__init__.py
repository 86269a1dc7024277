"""Not code: this marker makes the folder the package `locos_bench._builtin_tasks`, which is how
the built-in task YAMLs ship in the wheel and are found through `importlib.resources`
(`setup.py`, `locos_bench/_package_data.py`)."""
