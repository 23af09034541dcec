"""DVC fills the per-run curve template `.dvc/plots/runs.json` (one line per run, no smoothing)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DVC = Path(sys.executable).parent / "dvc"

# Two runs in long format, each in order of step, one after the other (as curves.csv files are).
CURVES = "chain,seed,step,test_loss\nA,0,0,0.69\nA,0,10,0.60\nA,1,0,0.70\nA,1,10,0.55\n"
PLOTS = """plots:
  - curves.csv:
      template: runs
      x: step
      y: test_loss
      title: two runs
"""


def _dvc(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        [str(DVC), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_runs_template_draws_one_line_per_run(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    _dvc(tmp_path, "init", "-q")
    shutil.copytree(REPO / ".dvc" / "plots", tmp_path / ".dvc" / "plots")
    (tmp_path / "curves.csv").write_text(CURVES)
    (tmp_path / "dvc.yaml").write_text(PLOTS)

    shown = json.loads(_dvc(tmp_path, "plots", "show", "--json"))
    (plot,) = shown["data"]["curves.csv"]
    spec = plot["content"]
    assert "<DVC_METRIC_" not in json.dumps(spec)  # every anchor filled
    assert len(spec["data"]["values"]) == 4
    assert spec["encoding"]["y"]["field"] == "test_loss"
    assert spec["encoding"]["detail"] == {"field": "run", "type": "nominal"}
    lag, starts, run = spec["transform"]
    assert lag["window"][0] == {"op": "lag", "field": "step", "as": "previous_x"}
    assert lag["groupby"] == run["groupby"] == ["rev"]
    assert "datum['step']" in starts["calculate"]
    assert "loess" not in json.dumps(spec)  # no smoothing
