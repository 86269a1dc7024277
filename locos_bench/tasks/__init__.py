"""Tasks: YAML specs, built-in generators, dataset loaders and the examples they produce.

Public face::

    from locos_bench.tasks import list_tasks, load_task, make_examples
    spec = load_task("kv-retrieval")
    examples = make_examples(spec, 8, model=loaded_model)
"""

from locos_bench.tasks.examples import (
    example_item,
    example_rng,
    format_example,
    make_example,
    make_examples,
    raw_example,
    resolve_format,
)
from locos_bench.tasks.files import (
    BUILTIN_TASKS_DIR,
    TASKS_ENV,
    context_tokens,
    list_tasks,
    load_task,
    read_task_file,
    resolve_tasks,
    spec_tokens,
    task_dirs,
    task_files,
    task_path,
)
from locos_bench.tasks.spec import Example, TaskSpec

__all__ = [
    "BUILTIN_TASKS_DIR",
    "TASKS_ENV",
    "context_tokens",
    "Example",
    "TaskSpec",
    "example_item",
    "example_rng",
    "format_example",
    "list_tasks",
    "load_task",
    "make_example",
    "make_examples",
    "raw_example",
    "read_task_file",
    "resolve_format",
    "resolve_tasks",
    "spec_tokens",
    "task_dirs",
    "task_files",
    "task_path",
]
