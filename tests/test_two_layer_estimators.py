"""Paper D's estimator, pseudo map, attention statistics and quantiser on hand-made inputs, and
the noise tables' training settings."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from replicate.analysis import kgram_estimate, match_matrix, matched_mass, order_lags
from replicate.analysis import pseudo_attention_map as pseudo
from replicate.config import load_params
from replicate.experiments.two_layer.bits import fake_quantise
from replicate.experiments.two_layer.darch import (
    EvalSettings,
    darch_config,
    eval_set,
    excess_stats,
    laplace_position_nll,
    model_position_nll,
)
from replicate.experiments.two_layer.data import authors_laplace, brute_force_estimate
from replicate.experiments.two_layer.maps import MapsSettings, order_source
from replicate.experiments.two_layer.statistics import layer1_checks
from replicate.experiments.two_layer.table2 import late_start
from replicate.experiments.two_layer.table3 import NoiseSettings, shared_members
from replicate.training import gpt_ensemble


def test_spec_example_k2() -> None:
    """D-EST-1, by hand: x = 0,1,1,0,1,1 at n = 6 (k = 2): the only match is i = 4, x_4 = 0."""
    seq = [0, 1, 1, 0, 1, 1]
    assert brute_force_estimate(seq, 2, 2, 6) == [1.0, 0.0]
    shared = kgram_estimate(torch.tensor([seq]), order_lags(2), 2)[0, 5]
    torch.testing.assert_close(shared, torch.tensor([1.0, 0.0], dtype=torch.float64))
    assert brute_force_estimate(seq, 2, 2, 3) is None  # I_3 = {} (no complete earlier window)


def test_shared_estimator_equals_brute_force_and_the_authors_laplace() -> None:
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 2, (5, 20), generator=gen)
    for order in (1, 2, 3):
        estimate = kgram_estimate(tokens, order_lags(order), 2)
        smooth = kgram_estimate(tokens, order_lags(order), 2, alpha=1.0)[..., 1]
        for b, seq in enumerate(tokens.tolist()):
            code = authors_laplace(seq, order, 1.0)
            np.testing.assert_allclose(smooth[b].numpy(), code, atol=1e-12)
            for n in range(1, 21):
                brute = brute_force_estimate(seq, order, 2, n)
                if brute is None:
                    assert bool(estimate[b, n - 1].isnan().all())
                else:
                    np.testing.assert_allclose(estimate[b, n - 1].numpy(), brute, atol=1e-12)


def test_pseudo_map_and_matched_mass_on_a_hand_sequence() -> None:
    """k = 1, x = 0 1 0 0 1: row n = 5 (x_5 = 1) matches keys i with x_{i-1} = 1: i = 3."""
    tokens = torch.tensor([[0, 1, 0, 0, 1]])
    ps = pseudo(tokens, order_lags(1))[0]
    assert ps[4].tolist() == [0.0, 0.0, 1.0, 0.0, 0.0]
    assert ps[3].tolist() == [0.0, 0.5, 0.0, 0.5, 0.0]  # x_4 = 0: i = 2 (x_1 = 0), i = 4 (x_3 = 0)
    match = match_matrix(tokens, order_lags(1))
    assert float(matched_mass(ps[None], match)[0]) == 1.0
    uniform = torch.ones(5, 5).tril() / torch.arange(1, 6).unsqueeze(1)
    assert float(matched_mass(uniform.double()[None], match)[0]) < 1.0


def test_layer1_checks() -> None:
    abar = np.array([0.01, 0.2, 0.75, 0.02, 0.01, 0.01])
    checks = layer1_checks(abar, 2)
    assert checks["topk"] == 1.0
    assert np.isclose(checks["increase"], 0.55)
    assert np.isclose(checks["ratio"], 0.75 / 0.02)
    assert np.isclose(checks["beyond"], 0.02)
    assert layer1_checks(abar[[0, 2, 1, 3, 4, 5]], 2)["increase"] < 0  # not monotone


def test_fake_quantise() -> None:
    x = torch.tensor([[[-1.0, -0.4, 0.2, 0.9]]])
    assert fake_quantise(x, 2).tolist() == [[[-1.0, 0.0, 0.0, 1.0]]]
    assert torch.equal(fake_quantise(x, 32), x)
    eight = fake_quantise(x, 8)
    assert float((eight - x).abs().max()) <= 1.0 / 127 / 2 + 1e-7


def test_every_noise_level_trains_as_the_shared_model() -> None:
    """Tables 3 and 4 train every eps level with the shared model's training for the order
    (its steps scaled by the order's step_scale) and read its members of the table's seeds
    at eps = 0; a seed the shared model lacks is named."""
    params = load_params(scale="ci")
    up = MapsSettings.model_validate(params.experiment("two_layer_maps").settings["ci"])
    table = NoiseSettings.model_validate(params.experiment("two_layer_table3").settings["ci"])
    steps = {run.order: round(run.step_scale * up.training.steps) for run in up.orders}
    for order, expected in steps.items():
        training = up.order_training(order)
        assert training.steps == expected
        assert training.model_dump(exclude={"steps"}) == up.training.model_dump(exclude={"steps"})
    assert shared_members(up, table) == [up.seeds.index(s) for s in table.seeds]
    with pytest.raises(ValueError, match=r"trains seeds \[0, 1, 2\], not \[7\]"):
        shared_members(up, table.model_copy(update={"seeds": [0, 7]}))
    with pytest.raises(ValueError, match="order 9 is not among"):
        up.order_training(9)


def test_late_positions_split_the_excess_and_the_estimator_ratio() -> None:
    """Table 2's excess over the late positions: the excess over every position is the
    position-weighted mean of the early and the late parts, read from one set of
    per-position losses, and the evaluation set's Laplace loss is the estimator's."""
    assert (late_start(32, 0.25), late_start(64, 0.25), late_start(4, 0.1)) == (24, 48, 3)
    params = load_params(scale="ci")
    up = MapsSettings.model_validate(params.experiment("two_layer_maps").settings["ci"])
    seq_len, start = 16, late_start(16, 0.25)
    sizes = EvalSettings(sequences=64, seed=3, map_sequences=4)
    data = eval_set(order_source(up, 2, per_kernel=1), seq_len, sizes)
    model = gpt_ensemble(darch_config(up.arch, up.states, seq_len, layers=1), [0, 1]).eval()
    every, late = excess_stats(model, data)["excess"], excess_stats(model, data, start)["excess"]
    nll = model_position_nll(model, data.tokens)
    early = (nll[..., :start] - data.true_position_nll[:, :start]).mean((-2, -1)).numpy()
    blend = (start * early + (seq_len - start) * late) / seq_len
    np.testing.assert_allclose(every, blend, rtol=1e-10)
    assert np.abs(every - late).min() > 1e-4  # the late window is a window, not the whole
    laplace = laplace_position_nll(data.tokens, 2, up.states)
    torch.testing.assert_close(data.laplace_position_nll, laplace)
