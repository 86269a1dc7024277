"""Ship the top-level `tasks/` and `baselines/` folders inside the wheel, where they stay the source.

Each folder becomes a package under `locos_bench` through `package_dir` (an `__init__.py`
marker in each makes it one). That one mapping serves both installs, on Python 3.10+: the
wheel copies the folders' files to `locos_bench/_builtin_tasks/` and `_builtin_baselines/`,
and setuptools' editable finder maps the same package names onto the checkout's folders, so
`importlib.resources` finds the data either way (`locos_bench/_package_data.py`). Without the
marker, the editable finder cannot import the mapped name; a build hook copying files would
serve the wheel only. The package list lives here, not in pyproject.toml, because pyproject
takes either a fixed list or `find` alone, and `find` sees only folders under `locos_bench/`.
Everything else is in pyproject.toml.
"""

from setuptools import find_namespace_packages, setup

DATA = {"locos_bench._builtin_tasks": "tasks", "locos_bench._builtin_baselines": "baselines"}

setup(
    packages=[*find_namespace_packages(include=["locos_bench", "locos_bench.*"], exclude=["*.__pycache__"]), *DATA,
              "locos_bench._builtin_tasks.examples"],  # tasks/examples/: a user task's YAML and data
    package_dir=DATA,
)
