"""An ensemble of E models trains exactly like E separate runs with the same seeds."""

from __future__ import annotations

import numpy as np
import torch

from lightning_modules import ChainMember, GPTConfig, OptimConfig
from replicate.markov import binary_kernel, binary_stationary
from replicate.training import TrainingPlan, configure_torch, train_ensemble

PLAN = TrainingPlan(steps=25, batch_size=4, seq_len=24, eval_every=5, test_sequences=4, test_seed=9)


def _member(p: float, q: float, seed: int) -> ChainMember:
    return ChainMember(binary_kernel(p, q), binary_stationary(p, q), seed)


def test_ensemble_equals_separate_runs() -> None:
    configure_torch(1)
    cfg = GPTConfig(block_size=PLAN.seq_len, tied=False, variant="gpt2")
    members = [_member(0.5, 0.8, 0), _member(0.2, 0.3, 1), _member(0.5, 0.8, 2)]
    together = train_ensemble(cfg, members, PLAN, OptimConfig(lr=1e-2), "ens", progress=False)
    assert together.test_loss.shape == (3, 6)
    for i, member in enumerate(members):
        alone = train_ensemble(cfg, [member], PLAN, OptimConfig(lr=1e-2), "one", progress=False)
        np.testing.assert_allclose(together.test_loss[i], alone.test_loss[0], rtol=0, atol=1e-6)
        for (name, a), b in zip(
            together.module.model.named_parameters(),
            alone.module.model.parameters(),
            strict=True,
        ):
            np.testing.assert_allclose(a[i].detach(), b[0].detach(), atol=1e-6, err_msg=name)
    # training moved the parameters: the comparison above is not between two initialisations
    assert not np.allclose(together.test_loss[:, 0], together.test_loss[:, -1], atol=1e-3)


def test_same_seed_same_result() -> None:
    configure_torch(1)
    cfg = GPTConfig(block_size=PLAN.seq_len)
    runs = [
        train_ensemble(cfg, [_member(0.5, 0.8, 3)], PLAN, OptimConfig(lr=1e-2), "r", progress=False)
        for _ in range(2)
    ]
    np.testing.assert_array_equal(runs[0].test_loss, runs[1].test_loss)


def test_initialize_hook_and_snapshots() -> None:
    configure_torch(1)
    plan = TrainingPlan(
        steps=10,
        batch_size=4,
        seq_len=16,
        eval_every=5,
        test_sequences=4,
        test_seed=1,
        snapshot_steps=(0, 5, 10),
    )

    def zero_positions(model) -> None:
        model.transformer["wpe"].weight.zero_()

    run = train_ensemble(
        GPTConfig(block_size=16),
        [_member(0.5, 0.8, 0)],
        plan,
        OptimConfig(lr=1e-2),
        "s",
        progress=False,
        initialize=zero_positions,
    )
    snaps = run.module.snapshots
    assert sorted(snaps) == [0, 5, 10]
    assert snaps[0]["transformer.wpe.weight"].abs().max() == 0  # the hook ran before step 0
    assert snaps[10]["transformer.wpe.weight"].abs().max() > 0  # and training moved on from it
    final = dict(run.module.model.named_parameters())["transformer.h.0.mlp.c_fc.weight"]
    assert torch.equal(snaps[10]["transformer.h.0.mlp.c_fc.weight"], final.detach())
