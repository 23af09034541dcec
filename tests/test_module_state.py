"""No module of `replicate` or `lightning_modules` keeps state that its functions change.

What a training or a command does must follow from its arguments (the runner hands every
training a `replicate.training.TrainingContext`), never from what an earlier call left in a
module: so no ``global`` statement, and no function that changes a module-level container
(an item or attribute assigned or deleted, or a mutating method such as ``append`` or
``update`` called on it). Module-level tables are constants; `functools.cache` on a function
of its arguments alone (`replicate.sources`) is a memo, not state.
"""

from __future__ import annotations

import ast

from .conftest import REPO

PACKAGES = ("replicate", "lightning_modules")
MUTATING_METHODS = frozenset(
    {
        "append",
        "extend",
        "insert",
        "pop",
        "popitem",
        "remove",
        "clear",
        "update",
        "setdefault",
        "add",
        "discard",
        "sort",
        "reverse",
    }
)


def _module_names(tree: ast.Module) -> set[str]:
    """Names bound at module level by assignment (not functions, classes or imports)."""
    names: set[str] = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        for target in targets:
            names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def _local_names(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Names a function binds itself (arguments and assignments): they shadow the module's."""
    args = function.args
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
    names = {a.arg for a in every if a is not None}
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Subscript | ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def problems_in(source: str, where: str) -> list[str]:
    """Each ``global`` statement and each change of a module-level name's content inside a
    function of ``source``, as "where:line: what"."""
    tree = ast.parse(source)
    module = _module_names(tree)
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        shared = module - _local_names(function)
        for node in ast.walk(function):
            if isinstance(node, ast.Global):
                found.append(f"{where}:{node.lineno}: global {', '.join(node.names)}")
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign | ast.Delete):
                targets = list(node.targets)
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            for target in targets:
                name = _root_name(target)
                if isinstance(target, ast.Subscript | ast.Attribute) and name in shared:
                    found.append(f"{where}:{node.lineno}: changes module-level {name}")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in MUTATING_METHODS
                and _root_name(node.func.value) in shared
            ):
                name = _root_name(node.func.value)
                found.append(f"{where}:{node.lineno}: {name}.{node.func.attr}(...)")
    return found


def test_no_module_keeps_state_its_functions_change() -> None:
    files = sorted(p for package in PACKAGES for p in (REPO / package).rglob("*.py"))
    assert len(files) > 50
    found = [
        problem
        for path in files
        for problem in problems_in(path.read_text(), str(path.relative_to(REPO)))
    ]
    assert found == []


def test_the_check_finds_each_kind_of_module_state() -> None:
    source = """
SETTINGS = {}
SEEN = []
CURRENT = None


def configure(value):
    global CURRENT
    CURRENT = value


def remember(key, value):
    SETTINGS[key] = value
    SEEN.append(key)
    SETTINGS.update(other=1)


def harmless(SEEN):
    SEEN.append(1)
    local = {}
    local["a"] = 1
    return SETTINGS.get("a")
"""
    assert problems_in(source, "m.py") == [
        "m.py:8: global CURRENT",
        "m.py:13: changes module-level SETTINGS",
        "m.py:14: SEEN.append(...)",
        "m.py:15: SETTINGS.update(...)",
    ]


def test_the_training_context_is_an_argument_not_a_module_setting() -> None:
    """Two trainings with different contexts, one after the other in one process, each do
    what their own context says (the old module-level settings leaked from one to the
    next)."""
    import numpy as np

    from lightning_modules import ChainMember, GPTConfig, OptimConfig
    from replicate.markov import binary_kernel, binary_stationary
    from replicate.training import (
        Calibration,
        TrainingContext,
        TrainingPlan,
        gpt_ensemble,
        train_ensemble,
    )

    plan = TrainingPlan(
        steps=12, batch_size=2, seq_len=8, eval_every=4, test_sequences=2, test_seed=0
    )
    members = [ChainMember(binary_kernel(0.2, 0.3), binary_stationary(0.2, 0.3), 0)]

    def train(context: TrainingContext) -> np.ndarray:
        model = gpt_ensemble(GPTConfig(vocab_size=2, n_embd=4, block_size=8), [0])
        return train_ensemble(model, members, plan, OptimConfig(), "t", context=context).eval_steps

    calibration = Calibration(5)
    assert train(TrainingContext(calibration=calibration)).tolist() == [0, 5]
    assert len(calibration.costs) == 1
    assert train(TrainingContext()).tolist() == [0, 4, 8, 12]
    assert len(calibration.costs) == 1
