"""The figure benchmark (`benchmarks/figure_output.py`) runs an experiment, keeps its
figure, and prints it written as before (five draws) and as the experiments write it (the
PNG from the layout check's draw), with the PNG bytes compared: a figure laid out by tight
layout draws the same every time, so its PNG is the same both ways."""

from __future__ import annotations

import sys

import pytest

from .conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import figure_output


def test_both_ways_print_and_write_the_same_png(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", ["figure_output.py", "local_global_fig5", "--rounds", "1"])
    figure_output.main()
    rows = capsys.readouterr().out.splitlines()
    timed = [row.split() for row in rows if row.split()[:1] in (["local_global_fig5"], ["all"])]
    assert [row[0] for row in timed] == ["local_global_fig5", "all"]
    assert all(row[1] == "before" and row[4] == "as-written" for row in timed)
    assert rows[-1] == "PNG bytes the same both ways: 1 of 1 figures"


def test_an_unknown_experiment_is_named() -> None:
    with pytest.raises(SystemExit, match=r"unknown experiment.*fig99"):
        figure_output.figures(["local_global_fig99"], steps=4)
