"""An ensemble of E models trains exactly like E separate runs with the same seeds.

Checked for every model family and every objective the harness trains with: next-token
cross-entropy on fixed chains (papers A, B), next-token cross-entropy with per-member
gradient clipping on in-context chains (paper D), the last-position soft-target loss on
in-context chains (paper C), and the binary-logit loss with plain SGD (paper B's canonical
model), on the GPT family, paper C's disentangled model and paper B's canonical model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest
import torch
from torch import nn

from lightning_modules import (
    BinaryLogitCE,
    ChainMember,
    GPTConfig,
    LastTokenLawCE,
    Member,
    NextTokenCE,
    Objective,
    OptimConfig,
)
from replicate.markov import InContextSource, binary_kernel, binary_stationary
from replicate.training import (
    TrainedEnsemble,
    TrainingContext,
    TrainingPlan,
    configure_torch,
    gpt_ensemble,
    train_ensemble,
)

PLAN = TrainingPlan(steps=25, batch_size=4, seq_len=24, eval_every=5, test_sequences=4, test_seed=9)


def _member(p: float, q: float, seed: int) -> ChainMember:
    return ChainMember(binary_kernel(p, q), binary_stationary(p, q), seed)


ModelFactory = Callable[[Sequence[int]], nn.Module]


def _gpt(**options: object) -> ModelFactory:
    return lambda seeds: gpt_ensemble(GPTConfig(block_size=PLAN.seq_len, **options), seeds)


def _disentangled(seeds: Sequence[int]) -> nn.Module:
    from lightning_modules.disentangled import DisentangledConfig, EnsembleDisentangled

    model = EnsembleDisentangled(
        DisentangledConfig(states=3, heads=2, seq_len=PLAN.seq_len), len(seeds)
    )
    model.init_members(list(seeds))
    return model


def _canonical(seeds: Sequence[int]) -> nn.Module:
    from lightning_modules.canonical import EnsembleCanonical

    inits = np.array([[0.5, -1.0, 0.1], [0.3, 0.4, -0.2], [1.0, 0.2, 0.0]])  # (e, w, b)
    return EnsembleCanonical(*inits[list(seeds)].T)  # member with seed s starts at inits[s]


IN_CONTEXT = InContextSource(states=3, order=2, alpha=0.5)
CASES: dict[str, tuple[ModelFactory, list[Member], Objective, OptimConfig]] = {
    "gpt-fixed-chains-next-token": (
        _gpt(tied=False, variant="gpt2"),
        [_member(0.5, 0.8, 0), _member(0.2, 0.3, 1), _member(0.5, 0.8, 2)],
        NextTokenCE(),
        OptimConfig(lr=1e-2),
    ),
    "gpt-in-context-next-token-clipped": (
        _gpt(vocab_size=3, n_embd=8, variant="gpt2"),
        [Member(IN_CONTEXT, s) for s in (0, 1, 2)],
        NextTokenCE(),
        OptimConfig(lr=1e-2, clip_norm=0.05, schedule="warmup_cosine"),
    ),
    "gpt-in-context-soft-target": (
        _gpt(vocab_size=3, n_embd=8),
        [Member(IN_CONTEXT, s) for s in (0, 1, 2)],
        LastTokenLawCE(eps=1e-8, output="logits"),
        OptimConfig(lr=1e-2, beta1=0.0, schedule="constant", weight_decay=0.0),
    ),
    "canonical-fixed-chains-binary-logit-sgd": (
        _canonical,
        [_member(0.5, 0.8, 0), _member(0.2, 0.3, 1), _member(0.5, 0.8, 2)],
        BinaryLogitCE(),
        OptimConfig(lr=0.5, weight_decay=0.0, schedule="constant", algorithm="sgd"),
    ),
    "disentangled-in-context-soft-target": (
        _disentangled,
        [Member(IN_CONTEXT, s) for s in (0, 1, 2)],
        LastTokenLawCE(eps=1e-8, output="probs"),
        OptimConfig(lr=1e-2, beta1=0.0, schedule="constant", weight_decay=0.0),
    ),
}


def _train(
    case: str,
    members: Sequence[Member],
    plan: TrainingPlan = PLAN,
    context: TrainingContext | None = None,
) -> TrainedEnsemble:
    factory, _, objective, optim = CASES[case]
    model = factory([m.seed for m in members])
    return train_ensemble(model, members, plan, optim, case, objective, context=context)


@pytest.mark.parametrize("case", sorted(CASES))
def test_ensemble_equals_separate_runs(case: str) -> None:
    configure_torch(1)
    members = CASES[case][1]
    together = _train(case, members)
    assert together.test_loss.shape == (3, 6)
    for i, member in enumerate(members):
        alone = _train(case, [member])
        np.testing.assert_allclose(together.test_loss[i], alone.test_loss[0], rtol=0, atol=1e-6)
        np.testing.assert_allclose(together.grad_norm[i], alone.grad_norm[0], rtol=1e-5)
        for (name, a), b in zip(
            together.model.named_parameters(), alone.model.parameters(), strict=True
        ):
            np.testing.assert_allclose(a[i].detach(), b[0].detach(), atol=1e-6, err_msg=name)
    # training moved the parameters: the comparison above is not between two initialisations
    assert not np.allclose(together.test_loss[:, 0], together.test_loss[:, -1], atol=1e-3)


def test_clipping_is_per_member_and_active() -> None:
    """With clip_norm far below the gradient norms every member is clipped on its own:
    the joint-norm clipping of Lightning's gradient_clip_val would differ (checked above by
    the ensemble/alone equality); here the clip must have been active and change training."""
    configure_torch(1)
    members = CASES["gpt-in-context-next-token-clipped"][1]
    clipped = _train("gpt-in-context-next-token-clipped", members)
    assert (clipped.grad_norm[:, 1:] > 4 * 0.05).all()  # the clip bound really binds
    factory, _, objective, optim = CASES["gpt-in-context-next-token-clipped"]
    free = OptimConfig(**{**optim.__dict__, "clip_norm": None})
    model = factory([m.seed for m in members])
    unclipped = train_ensemble(model, members, PLAN, free, "free", objective)
    assert not np.allclose(clipped.test_loss[:, -1], unclipped.test_loss[:, -1], atol=1e-4)


def test_same_seed_same_result() -> None:
    configure_torch(1)
    runs = [_train("gpt-fixed-chains-next-token", [_member(0.5, 0.8, 3)]) for _ in range(2)]
    np.testing.assert_array_equal(runs[0].test_loss, runs[1].test_loss)
    np.testing.assert_array_equal(runs[0].grad_norm, runs[1].grad_norm)


def test_population_gradient_norm_and_probes_are_recorded() -> None:
    configure_torch(1)
    plan = TrainingPlan(**{**PLAN.__dict__, "gradset_sequences": 64, "gradset_chunks": 8})
    members = CASES["gpt-in-context-soft-target"][1]
    factory, _, objective, optim = CASES["gpt-in-context-soft-target"]
    trained = train_ensemble(
        factory([m.seed for m in members]),
        members,
        plan,
        optim,
        "g",
        objective,
        probes={"bias": lambda model: model.lm_head.bias.detach().numpy().copy()},
    )
    assert trained.population_grad_norm.shape == (3, 6)
    assert (trained.population_grad_floor > 0).all()
    assert trained.probes["bias"].shape == (3, 6, 3)
    np.testing.assert_array_equal(
        trained.probes["bias"][:, -1], trained.model.lm_head.bias.detach()
    )


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
        gpt_ensemble(GPTConfig(block_size=16), [0], zero_positions),
        [_member(0.5, 0.8, 0)],
        plan,
        OptimConfig(lr=1e-2),
        "s",
    )
    snaps = run.module.snapshots
    assert sorted(snaps) == [0, 5, 10]
    assert snaps[0]["transformer.wpe.weight"].abs().max() == 0  # the hook ran before step 0
    assert snaps[10]["transformer.wpe.weight"].abs().max() > 0  # and training moved on from it
    final = dict(run.model.named_parameters())["transformer.h.0.mlp.c_fc.weight"]
    assert torch.equal(snaps[10]["transformer.h.0.mlp.c_fc.weight"], final.detach())


def test_orders_trained_as_one_ensemble_equal_their_own_trainings() -> None:
    """Paper D's maps train the orders that share a step count as one ensemble (cheaper per
    step): each order's models and test losses are those of training that order alone."""
    from types import SimpleNamespace

    from replicate.experiments.two_layer.maps import MapsSettings, train_orders

    configure_torch(1)
    settings = {
        "states": 2,
        "seeds": [0, 1],
        "per_kernel": 1,
        "arch": {"n_embd": 8, "value_rpe": True, "mlp": "app_b1", "tied": False, "init_std": 0.02},
        "training": {"steps": 12, "batch_size": 4, "seq_len": 8, "eval_every": 4,
                     "test_sequences": 4, "test_seed": 3},
        "optim": {"lr": 3e-3, "beta1": 0.9, "beta2": 0.95, "weight_decay": 1e-3,
                  "schedule": "onecycle_cosine", "pct_start": 0.02, "div_factor": 100.0,
                  "final_div_factor": 0.05, "clip_norm": 1.0},
        "evaluation_set": {"sequences": 4, "seed": 5, "map_sequences": 2},
        "convergence": {"fraction": 0.3333, "z": 3.0, "min_drop": 0.005},
    }  # fmt: skip
    ctx = SimpleNamespace(label=lambda text: text, training=TrainingContext())
    orders = [{"order": 1, "step_scale": 2.0}, {"order": 2, "step_scale": 1.0}]
    joint = train_orders(
        MapsSettings(**settings, orders=[*orders, {"order": 3, "step_scale": 2.0}]), ctx
    )
    for run in orders:
        alone = train_orders(MapsSettings(**settings, orders=[run]), ctx)[run["order"]]
        together = joint[run["order"]]
        assert together.steps == alone.steps == round(12 * run["step_scale"])
        assert torch.equal(together.test_tokens, alone.test_tokens)
        np.testing.assert_allclose(together.test_loss, alone.test_loss, rtol=0, atol=1e-6)
        for (name, a), b in zip(
            together.model.state_dict().items(), alone.model.state_dict().values(), strict=True
        ):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-6, err_msg=name)
    # training moved the models: the comparison above is not between two initialisations
    assert not np.allclose(joint[1].test_loss[:, 0], joint[1].test_loss[:, -1], atol=1e-3)
