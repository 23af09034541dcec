"""A training's log, as a rule writes it to a file: whole progress lines, no notices.

A progress bar redrawn in place is a terminal's; in a file (a rule's log) it is one line per
tenth of the training, with no carriage-return frames, and Lightning's notices of the device
found and of logging tips are left out (`replicate.training.callbacks.LabelledProgressBar`,
`replicate.training.trainer`).
"""

from __future__ import annotations

import subprocess
import sys

from .conftest import REPO

SCRIPT = """
from lightning_modules import ChainMember, GPTConfig, OptimConfig
from replicate.markov import binary_kernel, binary_stationary
from replicate.training import (
    TrainingContext, TrainingPlan, configure_torch, gpt_ensemble, train_ensemble,
)

configure_torch(1)
plan = TrainingPlan(
    steps=200, batch_size=2, seq_len=8, eval_every=50, test_sequences=2, test_seed=0
)
members = [ChainMember(binary_kernel(0.2, 0.3), binary_stationary(0.2, 0.3), 0)]
model = gpt_ensemble(GPTConfig(vocab_size=2, n_embd=4, block_size=8), [0])
train_ensemble(
    model, members, plan, OptimConfig(), "the label", context=TrainingContext(progress=True)
)
"""


def test_a_training_logged_to_a_file_writes_whole_progress_lines_and_no_notices() -> None:
    res = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-3000:]
    log = res.stdout + res.stderr
    assert "\r" not in log
    assert "Tip" not in log and "GPU available" not in log
    lines = [line for line in log.splitlines() if line.startswith("the label")]
    assert [line.split("|")[2].split()[0] for line in lines] == [
        f"{steps}/200" for steps in range(20, 201, 20)
    ]
    assert "loss=" in lines[-1]
