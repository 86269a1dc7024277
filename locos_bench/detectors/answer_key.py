"""Where a planted answer key could be read off a model: what a cheating detector would search.

The planted models' ground truth (their head sets and role texts) is looked up by alias and
never travels on the model a detector scores; `answer_key_leaks` checks that, walking the
`LoadedModel` and everything reachable from it (the conformance check `no_answer_key` and the
harness's tests run it).
"""

from __future__ import annotations

import contextlib
import functools
import types
from typing import Any

import numpy as np
import torch

_KEY_NAMES = ("ground_truth", "answer_key")
"""Attribute or key names that would announce a planted answer key."""


@functools.cache
def _answer_keys() -> tuple[frozenset[frozenset[tuple[int, int]]], tuple[str, ...]]:
    """The planted models' head sets of two or more heads (a single head is too common a
    pair to search for) and their role texts, and the organism's best sets of two or more
    heads: what a leak would look like."""
    from locos_bench.models.organism import oracle_head_sets
    from locos_bench.models.planted import PLANTED_TASKS, planted_ground_truth

    sets, texts = set(), set()
    for alias in PLANTED_TASKS:
        truth = planted_ground_truth(alias)["ground_truth"]
        for value in truth.values():
            if isinstance(value, list) and len(value) >= 2 and all(_is_head(h) for h in value):
                sets.add(frozenset((int(h[0]), int(h[1])) for h in value))
        texts.update([truth["description"], *truth["roles"].values()])
    sets.update(frozenset((h[0], h[1]) for h in heads) for heads in oracle_head_sets() if len(heads) >= 2)
    return frozenset(sets), tuple(sorted(texts))


def _is_head(item: Any) -> bool:
    return (isinstance(item, (list, tuple)) and len(item) == 2
            and all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in item))


def answer_key_leaks(model: Any) -> list[str]:
    """Where a planted answer key can be read off `model`: the paths, from `model`, of every
    attribute or key named like one (`ground_truth`, `answer_key`), every planted head set of
    two or more heads (a list, tuple, set or mapping's keys of `(layer, head)` pairs, in any
    order) and every planted role text. What a cheating detector would search: instance
    attributes (`vars()`, slots), mappings, sequences and closures, recursively, through the
    `LoadedModel`, its info and spec, the bridge and the HF model (modules, configs, hooks)
    and the tokenizer, plus `model.describe()`. Tensors (the weights), modules, classes and
    functions' globals are not walked: the key may be inferred from weights, not read."""
    head_sets, texts = _answer_keys()
    found: list[str] = []
    seen: set[int] = set()
    keep: list[Any] = []  # objects stay alive during the walk, so their ids stay unique

    def name(label: Any, path: str) -> None:
        if isinstance(label, str) and any(k in label.lower() for k in _KEY_NAMES):
            found.append(path)

    def walk(obj: Any, path: str, depth: int) -> None:
        if isinstance(obj, str):
            if any(text in obj for text in texts):
                found.append(path)
            return
        if (obj is None or isinstance(obj, (bool, int, float, complex, bytes, np.generic, torch.Tensor,
                                            np.ndarray, torch.dtype, torch.device, type, types.ModuleType))
                or depth > 64 or id(obj) in seen):
            return
        seen.add(id(obj))
        keep.append(obj)
        if isinstance(obj, dict) or (hasattr(obj, "items") and hasattr(obj, "keys") and not hasattr(obj, "__dict__")):
            try:
                items = list(obj.items())
            except Exception:  # a mapping-like that cannot list itself: nothing to read
                return
            if len(items) >= 2 and all(_is_head(k) for k, _ in items):
                if frozenset((int(k[0]), int(k[1])) for k, _ in items) in head_sets:
                    found.append(path + ".keys()")
            for key, value in items:
                name(key, f"{path}[{key!r}]")
                walk(value, f"{path}[{key!r}]", depth + 1)
            return
        if isinstance(obj, (list, tuple, set, frozenset)):
            if len(obj) >= 2 and all(_is_head(h) for h in obj):
                if frozenset((int(h[0]), int(h[1])) for h in obj) in head_sets:
                    found.append(path)
                return
            for i, item in enumerate(obj):
                walk(item, f"{path}[{i}]", depth + 1)
            return
        if isinstance(obj, types.MethodType):
            walk(obj.__self__, f"{path}.__self__", depth + 1)
            return
        if isinstance(obj, types.FunctionType):
            for i, cell in enumerate(obj.__closure__ or ()):
                with contextlib.suppress(ValueError):  # an empty cell
                    walk(cell.cell_contents, f"{path}.<closure {i}>", depth + 1)
            walk(obj.__defaults__, f"{path}.__defaults__", depth + 1)
            walk(obj.__kwdefaults__, f"{path}.__kwdefaults__", depth + 1)
            return
        if isinstance(obj, functools.partial):
            walk((obj.func, obj.args, obj.keywords), f"{path}.<partial>", depth + 1)
        attrs: dict[str, Any] = dict(getattr(obj, "__dict__", None) or {})
        for cls in type(obj).__mro__:
            for slot in getattr(cls, "__slots__", ()):
                if isinstance(slot, str) and slot not in attrs and hasattr(obj, slot):
                    attrs[slot] = getattr(obj, slot, None)
        for attr, value in attrs.items():
            name(attr, f"{path}.{attr}")
            walk(value, f"{path}.{attr}", depth + 1)

    walk(model, "model", 0)
    describe = getattr(model, "describe", None)
    if callable(describe):
        walk(describe(), "model.describe()", 0)
    return sorted(set(found))
