"""Shared fixtures: the real params.yaml, and a tiny copy of it for end-to-end runs."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from replicate.config import read_params_file

REPO = Path(__file__).resolve().parents[1]
PARAMS_FILE = REPO / "params.yaml"

# Small enough for seconds on one CPU core, large enough to exercise every code path.
TINY_TRAINING = {"steps": 30, "batch_size": 4, "seq_len": 32, "eval_every": 10, "test_sequences": 4}
# Paper B's gradient-flow counts (set to 4) and its nested flow / canonical-SGD blocks.
TINY_LOCAL_GLOBAL_COUNTS = (
    "inits_per_sigma",
    "grid_points",
    "common_inits",
    "check_points",
    "plane_inits",
    "random_rate_points",
    "plotted_per_axis",
    "plotted_trajectories",
)
TINY_LOCAL_GLOBAL_BLOCKS = {"flow": {"t_max": 100.0}, "sgd": {"steps": 30, "seq_len": 32}}


@pytest.fixture
def params_dict() -> dict:
    return read_params_file(PARAMS_FILE)


def shrink(data: dict) -> dict:
    """A copy of params with every ci training block reduced to TINY_TRAINING."""
    data = copy.deepcopy(data)
    for entry in data["experiments"].values():
        ci = entry["settings"]["ci"]
        if "training" in ci:
            ci["training"].update(TINY_TRAINING)
        if "seeds" in ci:
            ci["seeds"] = ci["seeds"][:2]
        if "probability_positions" in ci:
            ci["probability_positions"] = 5
        if entry["paper"] == "local_global":
            ci.update({key: 4 for key in TINY_LOCAL_GLOBAL_COUNTS if key in ci})
            for key, tiny in TINY_LOCAL_GLOBAL_BLOCKS.items():
                if key in ci:
                    ci[key].update(tiny)
    return data


@pytest.fixture
def tiny_params_file(tmp_path: Path, params_dict: dict) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(shrink(params_dict), sort_keys=False))
    return path
