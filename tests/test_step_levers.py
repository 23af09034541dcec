"""The lever benchmark (`benchmarks/step_levers.py`) runs and prints one row per variant,
bf16 autocast changing the bits; its candidate Dirichlet(1) draw has Dirichlet(1)'s moments
(the law the lever would keep)."""

from __future__ import annotations

import sys

import pytest
import torch

from .conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import step_levers


def test_every_variant_prints_its_row(capsys: pytest.CaptureFixture[str]) -> None:
    variants = ["as trained", "fused AdamW", "bf16 autocast"]
    step_levers.measure("paper D", step_levers.paper_d(), variants, steps=1, rounds=1)
    rows = capsys.readouterr().out.splitlines()
    assert [row.split()[2:4] for row in rows] == [["as", "trained"], ["fused", "AdamW"],
                                                   ["bf16", "autocast"]]  # fmt: skip
    assert rows[2].split()[-1] == "False"  # bf16 autocast did change the bits


def test_the_candidate_kernels_have_dirichlet_one_moments() -> None:
    rows = step_levers.exponential_kernels((4000, 4, 3), torch.Generator().manual_seed(0))
    assert torch.allclose(rows.sum(-1), torch.ones(4000, 4, dtype=torch.float64))
    assert abs(rows.mean().item() - 1 / 3) < 1e-3
    assert abs(rows.var().item() - 2 / 36) < 2e-3  # (S - 1) / (S^2 (S + 1)), S = 3
