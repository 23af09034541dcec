"""Paper C's Fig. 7 reads what App. I.3 leaves unstated (alpha, lr, schedule, readout init) as
one of two readings (params.yaml ``reading``): ``spec``, a constant lr and a zero readout;
``code``, the authors' code defaults, an optax-like cosine from lr to 0 over the run and a
N(0, 1/d) readout. Both validate and build the model; a bad reading is named. No training."""

from __future__ import annotations

import copy
import itertools
import math

import pytest
import torch

from lightning_modules import SequenceBatch
from lightning_modules.ensemble_module import EnsembleModule
from replicate.config import load_params
from replicate.experiments.subngrams.fig7 import Fig7Settings
from replicate.experiments.subngrams.general import general_config
from replicate.params import ConfigError
from replicate.training import gpt_ensemble

NAME = "subngrams_fig7"
PREFIX = f"experiments.{NAME}.settings.ci"


def _written(params_dict: dict) -> dict:
    """Fig. 7's ci settings as params.yaml writes them (a copy)."""
    return copy.deepcopy(params_dict["experiments"][NAME]["settings"]["ci"])


def _settings(params_dict: dict, reading: str) -> Fig7Settings:
    return Fig7Settings(**{**_written(params_dict), "reading": reading})


def _model(s: Fig7Settings):
    cfg = general_config(
        s.chain.states, s.chain.order, s.training.seq_len, s.embedding, s.mlp, s.read.readout
    )
    return gpt_ensemble(cfg, s.seeds), cfg.n_embd


def test_the_repository_default_is_the_spec_reading(params_dict: dict) -> None:
    for scale in ("ci", "paper"):
        s = load_params(params_dict, scale=scale, only=[NAME]).settings(NAME)
        assert isinstance(s, Fig7Settings) and s.reading == "spec"
        assert s.full_chain.alpha == 0.5
        assert (s.full_optim.lr, s.full_optim.schedule) == (0.005, "constant")


@pytest.mark.parametrize("reading", ["spec", "code"])
def test_both_readings_validate_and_build_the_model(params_dict: dict, reading: str) -> None:
    s = _settings(params_dict, reading)
    want = s.readings[reading]
    assert s.full_chain.alpha == want.alpha and s.full_chain.states == s.chain.states
    assert (s.full_optim.lr, s.full_optim.schedule) == (want.lr, want.schedule)
    model, d = _model(s)
    tokens = torch.zeros(len(s.seeds), 2, s.training.seq_len, dtype=torch.long)
    with torch.no_grad():
        logits = model(tokens)
    assert logits.shape == (len(s.seeds), 2, s.training.seq_len, s.chain.states)
    assert torch.isfinite(logits).all()
    readout = model.lm_head.weight.detach()
    if reading == "spec":
        assert torch.count_nonzero(readout) == 0
    else:  # N(0, 1/d): 5 x 69 draws per member, their std within 20 % of 1 / sqrt(d)
        assert torch.count_nonzero(readout) == readout.numel()
        for member in readout:
            assert member.std().item() == pytest.approx(1 / math.sqrt(d), rel=0.2)
            assert abs(member.mean().item()) < 3 / math.sqrt(d * member.numel())


def _rates(s: Fig7Settings, steps: int) -> list[float]:
    """The learning rate the module's scheduler gives at each optimiser step 0..steps-1."""
    model, _ = _model(s)
    module = EnsembleModule(
        model,
        s.full_optim.config,
        steps=steps,
        test_batch=SequenceBatch(torch.zeros(len(s.seeds), 2, 2, dtype=torch.long)),
        eval_every=steps,
        eval_batch=2,
    )
    configured = module.configure_optimizers()
    if isinstance(configured, torch.optim.Optimizer):
        return [configured.param_groups[0]["lr"]] * steps
    opt, sched = configured["optimizer"], configured["lr_scheduler"]["scheduler"]
    assert configured["lr_scheduler"]["interval"] == "step"
    rates = []
    for _ in range(steps):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()  # no gradients: a no-op that keeps the scheduler's order of calls
        sched.step()
    return rates


def test_code_reading_decays_as_a_cosine_from_lr_to_zero(params_dict: dict) -> None:
    s = _settings(params_dict, "code")
    lr, steps = s.read.lr, s.training.steps
    rates = _rates(s, steps)
    optax = [lr * 0.5 * (1 + math.cos(math.pi * t / steps)) for t in range(steps)]
    assert rates[0] == pytest.approx(lr, rel=1e-12)  # no warm-up
    assert rates[steps // 2] == pytest.approx(lr / 2, abs=lr * math.pi / steps)
    assert rates[-1] < 1e-3 * lr
    assert all(a >= b for a, b in itertools.pairwise(rates))
    assert max(abs(a - b) for a, b in zip(rates, optax, strict=True)) <= lr * math.pi / (2 * steps)


def test_spec_reading_keeps_a_constant_rate(params_dict: dict) -> None:
    s = _settings(params_dict, "spec")
    assert set(_rates(s, 8)) == {s.read.lr}


@pytest.mark.parametrize(
    ("mutate", "needles"),
    [
        (lambda c: c.update(reading="paper"), [f"{PREFIX}.reading", "'paper'"]),
        (
            lambda c: c["readings"]["code"].update(schedule="linear"),
            [f"{PREFIX}.readings.code.schedule", "'linear'"],
        ),
        (
            lambda c: c.update(reading="code", readings={"spec": c["readings"]["spec"]}),
            ["reading = 'code'", "not among readings"],
        ),
    ],
)
def test_a_bad_reading_is_named(params_dict: dict, mutate, needles) -> None:
    data = copy.deepcopy(params_dict)
    mutate(data["experiments"][NAME]["settings"]["ci"])
    with pytest.raises(ConfigError) as info:
        load_params(data, scale="ci", only=[NAME]).settings(NAME)
    for needle in needles:
        assert needle in str(info.value)
