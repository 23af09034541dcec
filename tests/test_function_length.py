"""The claims code and the training code read one function at a time: none is over 60
lines (a longer one is a sequence of steps that each deserve a name)."""

from __future__ import annotations

import ast
from pathlib import Path

from .conftest import REPO

LIMIT = 60
CLAIMS_CODE = [
    REPO / "replicate" / f"{name}.py"
    for name in (
        "checkout",
        "citations",
        "claim_files",
        "claims",
        "cli",
        "control_record",
        "controls",
        "expect",
        "metric_keys",
        "record",
        "report",
        "stability",
        "suite",
        "verdicts",
    )
]
TRAINING_CODE = [
    *sorted((REPO / "replicate" / "training").glob("*.py")),
    *sorted((REPO / "lightning_modules").glob("*.py")),
    REPO / "replicate" / "experiments" / "runner.py",
]


def long_functions(path: Path, limit: int = LIMIT) -> list[str]:
    """ "file:line name (n lines)" for each function of ``path`` longer than ``limit``."""
    return [
        f"{path.relative_to(REPO)}:{node.lineno} {node.name} "
        f"({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > limit
    ]


def test_no_function_of_the_claims_and_training_code_is_over_60_lines() -> None:
    files = [*CLAIMS_CODE, *TRAINING_CODE]
    assert all(path.exists() for path in files)
    assert [problem for path in files for problem in long_functions(path)] == []


def test_the_length_check_finds_a_long_function() -> None:
    assert long_functions(REPO / "replicate" / "claims.py", limit=10) != []
