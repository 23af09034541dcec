"""An ensemble trained in chunks of members equals the unchunked run, and the precision
setting reaches the Trainer."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch

from replicate.params import Precision
from replicate.training import (
    DeviceSettings,
    TrainedEnsemble,
    TrainingContext,
    TrainingPlan,
    configure_torch,
    gpt_ensemble,
    train_ensemble,
)
from replicate.training.chunking import chunk_bounds, members_that_fit, select_members
from tests.test_ensemble_equivalence import CASES, PLAN, _member, _train

PROBED = TrainingPlan(**{**PLAN.__dict__, "snapshot_steps": (0, 10, 25)})


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    configure_torch(1)
    yield


def _tied_gpt(chunk: int | None, precision: Precision = "32-true") -> TrainedEnsemble:
    """Three tied GPT members on two chains with a probe and snapshots."""
    from lightning_modules import GPTConfig, OptimConfig

    members = [_member(0.5, 0.8, 0), _member(0.2, 0.3, 1), _member(0.5, 0.8, 2)]
    model = gpt_ensemble(GPTConfig(block_size=PLAN.seq_len, tied=True), [0, 1, 2])
    return train_ensemble(
        model,
        members,
        PROBED,
        OptimConfig(lr=1e-2),
        "tied",
        probes={"bias": lambda m: m.lm_head.bias.detach().cpu().numpy().copy()},
        context=TrainingContext(DeviceSettings(precision, chunk)),
    )


def _assert_same(chunked: TrainedEnsemble, whole: TrainedEnsemble) -> None:
    np.testing.assert_array_equal(chunked.eval_steps, whole.eval_steps)
    np.testing.assert_allclose(chunked.test_loss, whole.test_loss, rtol=0, atol=1e-6)
    np.testing.assert_allclose(chunked.grad_norm, whole.grad_norm, rtol=1e-5)
    for name, values in whole.probes.items():
        np.testing.assert_allclose(chunked.probes[name], values, atol=1e-6, err_msg=name)
    for (name, a), b in zip(
        chunked.model.named_parameters(), whole.model.parameters(), strict=True
    ):
        np.testing.assert_allclose(a.detach(), b.detach(), atol=1e-6, err_msg=name)
    assert sorted(chunked.module.snapshots) == sorted(whole.module.snapshots)
    for step, params in whole.module.snapshots.items():
        for name, value in params.items():
            np.testing.assert_allclose(chunked.module.snapshots[step][name], value, atol=1e-6)
    np.testing.assert_array_equal(chunked.test_tokens, whole.test_tokens)


@pytest.mark.parametrize("chunk", [1, 2])
def test_tied_gpt_in_chunks_equals_unchunked(chunk: int, capsys: pytest.CaptureFixture) -> None:
    whole = _tied_gpt(None)
    assert "chunks" not in capsys.readouterr().err  # on a CPU, no chunks unless asked
    chunked = _tied_gpt(chunk)
    assert f"3 members in {-(-3 // chunk)} chunks of at most {chunk}" in capsys.readouterr().err
    assert whole.test_loss.shape == chunked.test_loss.shape == (3, 6)
    _assert_same(chunked, whole)
    # the trainings moved the weights: the equality above is not between initialisations
    assert not np.allclose(whole.test_loss[:, 0], whole.test_loss[:, -1], atol=1e-3)
    # the tie survives the split: the chunk's readout is its embedding
    assert chunked.model.lm_head.weight is chunked.model.transformer["wte"].weight


@pytest.mark.parametrize(
    "case", ["gpt-in-context-next-token-clipped", "canonical-fixed-chains-binary-logit-sgd"]
)
def test_other_models_in_chunks_equal_unchunked(case: str, capsys: pytest.CaptureFixture) -> None:
    members = CASES[case][1]
    whole = _train(case, members)
    chunked = _train(
        case, members, context=TrainingContext(DeviceSettings(max_members_per_chunk=2))
    )
    assert "3 members in 2 chunks of at most 2" in capsys.readouterr().err
    _assert_same(chunked, whole)


def test_select_members_slices_every_parameter() -> None:
    from lightning_modules import GPTConfig

    model = gpt_ensemble(GPTConfig(block_size=8), [0, 1, 2, 3])
    part = select_members(model, [3, 1])
    assert part.ensemble == 2
    for (name, a), b in zip(part.named_parameters(), model.parameters(), strict=True):
        assert torch.equal(a, b[[3, 1]]), name
    assert model.ensemble == 4  # the original is untouched


def test_chunk_sizes() -> None:
    assert [list(r) for r in chunk_bounds(5, 2)] == [[0, 1], [2, 3], [4]]
    assert members_that_fit(member_bytes=3e9, free_bytes=70e9, fraction=0.8) == 18
    assert members_that_fit(member_bytes=90e9, free_bytes=70e9, fraction=0.8) == 1
    with pytest.raises(ValueError):
        DeviceSettings(max_members_per_chunk=0)
    with pytest.raises(ValueError):
        DeviceSettings(precision="64-true")  # type: ignore[arg-type]


def test_precision_reaches_the_trainer() -> None:
    """bf16 autocast on the CPU changes the training (so the setting is applied) but not
    what it learns: the final losses stay within 5e-3 of float32's (measured: 2.4e-4)."""
    full, half = _tied_gpt(None), _tied_gpt(None, precision="bf16-mixed")
    assert not np.array_equal(full.test_loss, half.test_loss)
    np.testing.assert_allclose(half.test_loss[:, -1], full.test_loss[:, -1], atol=5e-3)


def test_automatic_chunks_on_cuda_are_sized_from_one_members_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CUDA path of automatic chunking, on a CPU with the device calls replaced: one
    member's batch of the training's largest shape is drawn (from the member's own "memory"
    stream: no training stream moves, by construction of `member_seed`, which this test does
    not check) and measured, and the chunk holds the members whose measured bytes fit in
    `memory_fraction` of the free memory. (A stream missing from `STREAMS` stops every
    paper-scale training on a GPU.)"""
    import replicate.training.trainer as training
    from lightning_modules import GPTConfig, NextTokenCE, OptimConfig

    measured: list[tuple[int, ...]] = []

    def member_bytes(model: object, objective: object, batch: object, dtype: object) -> float:
        measured.append(tuple(batch.tokens.shape))  # type: ignore[attr-defined]
        return 3e9

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (70e9, 80e9))
    monkeypatch.setattr(training, "cuda_member_bytes", member_bytes)
    members = [_member(0.5, 0.8, s) for s in range(40)]
    model = gpt_ensemble(GPTConfig(block_size=PLAN.seq_len), [m.seed for m in members])
    plan = TrainingPlan(**{**PLAN.__dict__, "gradset_sequences": 4 * PLAN.batch_size * 8})
    run = training._Run(plan, OptimConfig(), NextTokenCE(), None, TrainingContext())
    per_chunk = training._members_per_chunk(model, members, run)
    assert per_chunk == members_that_fit(3e9, 70e9, DeviceSettings().memory_fraction) == 18
    rows = max(plan.batch_size, plan.gradset_sequences // plan.gradset_chunks)
    assert measured == [(1, rows, plan.seq_len + NextTokenCE().extra_tokens())]
