"""Paper A: training and measurement shared by the training figures (Figs. 1, 3, 4, 5)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import pandas as pd
import torch

from lightning_modules import EnsembleGPT, GPTConfig
from replicate import analysis
from replicate.experiments.base import Metrics, RunContext
from replicate.markov import (
    binary_entropy_rate,
    binary_kernel,
    binary_stationary,
    binary_unigram_entropy,
    symmetric_kernel,
)
from replicate.settings import BinaryChainSettings, ModelSettings, OptimSettings, TrainingSettings
from replicate.training import TrainedEnsemble, TrainingPlan, gpt_ensemble, train_ensemble

if TYPE_CHECKING:
    from lightning_modules import ChainMember

InitialLaw = Literal["stationary", "uniform"]


# ----------------------------------------------------------------------------- shared training
@dataclass
class FittedRun:
    """What `BinaryRun` and `StateRun` share: the test-loss curve against the two oracles.

    Every run is built with keyword arguments, so the field order is immaterial.
    """

    tied: bool
    seed: int
    steps: np.ndarray
    test_loss: np.ndarray
    oracle_bigram: float
    oracle_unigram: float
    kappa: float
    run_class: analysis.RunClass
    transition_means: np.ndarray

    @property
    def tying(self) -> str:
        return "tied" if self.tied else "untied"

    @property
    def final_loss(self) -> float:
        return float(self.test_loss[-1])

    def fit_metrics(self) -> Metrics:
        """Final loss, its distance to the bigram and unigram oracles, kappa and the class."""
        return {
            "final_loss": self.final_loss,
            "delta_bigram": self.final_loss - self.oracle_bigram,
            "delta_unigram": self.final_loss - self.oracle_unigram,
            "kappa": self.kappa,
            "class": float(self.run_class),
        }


@dataclass
class BinaryRun(FittedRun):
    """One trained model on a binary chain, with everything the figures and claims read."""

    chain: BinaryChainSettings
    sequence: np.ndarray
    prob_one: np.ndarray
    norm_a: float
    bias: float
    mean_norm_z: float
    """Mean over the positions of the first test sequence of ||z_n|| (the readout's input)."""
    mean_abs_a_dot_z: float
    """Mean over the same positions of |<a, z_n>| (paper A, Sec. 4.1: about 0.04)."""


def readout_geometry(model: EnsembleGPT, tokens: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Per member, mean over positions of ||z_n|| and of |<a, z_n>|, a = w_1 - w_0, z_n the
    input of the linear readout (after ln_f where the variant has one; paper A, Sec. 4.1 and
    App. A's Linear layer), for (E, T, N) ``tokens``."""
    traces: list[dict[str, torch.Tensor]] = []
    with torch.no_grad():
        model.eval()(tokens, traces)
        z = model.transformer["ln_f"](traces[-1]["z"]).double()
    w = model.lm_head.weight.detach().double()
    a = w[:, 1] - w[:, 0]  # (E, d)
    a_dot_z = torch.einsum("etnd,ed->etn", z, a)
    return z.norm(dim=-1).mean((1, 2)).numpy(), a_dot_z.abs().mean((1, 2)).numpy()


def initial_law(chain: BinaryChainSettings, law: InitialLaw) -> np.ndarray:
    """Law of x_1: the stationary pi(p, q) (paper A, Sec. 2.2) or uniform (authors' option)."""
    return binary_stationary(chain.p, chain.q) if law == "stationary" else np.full(2, 0.5)


def gpt_config(model: ModelSettings, vocab: int, seq_len: int, tied: bool) -> GPTConfig:
    return GPTConfig(vocab_size=vocab, block_size=seq_len, tied=tied, **model.model_dump())


def training_plan(training: TrainingSettings) -> TrainingPlan:
    return TrainingPlan(**training.model_dump())


def train_and_fit(
    members: list[ChainMember],
    vocab: int,
    tied: bool,
    model: ModelSettings,
    training: TrainingSettings,
    optim: OptimSettings,
    ctx: RunContext,
    detail: str = "",
) -> tuple[TrainedEnsemble, list[dict]]:
    """Train ``members`` as one ensemble; per member, its curve and fit against the oracles.

    Each member's dict holds the `FittedRun` fields with ``steps`` and ``transition_means``
    (keyword arguments of `BinaryRun` and `StateRun`).
    """
    from lightning_modules import OptimConfig  # imports Lightning: only where trained

    tying = "tied" if tied else "untied"
    trained = train_ensemble(
        gpt_ensemble(gpt_config(model, vocab, training.seq_len, tied), [m.seed for m in members]),
        members,
        training_plan(training),
        OptimConfig(**optim.model_dump()),
        label=ctx.label(f"{detail}{tying} ({len(members)} models)"),
        context=ctx.training,
    )
    final = trained.evaluate()
    cls = ctx.classification
    fits = []
    for i, member in enumerate(members):
        bigram, unigram = analysis.oracle_losses(trained.test_tokens[i], member.kernel)
        kappa = analysis.gap_closed(float(final.loss[i]), bigram, unigram)
        fits.append(
            {
                "steps": trained.eval_steps,
                "test_loss": trained.test_loss[i],
                "oracle_bigram": bigram,
                "oracle_unigram": unigram,
                "kappa": kappa,
                "run_class": analysis.classify(kappa, cls),
                "transition_means": final.transition_means[i],
            }
        )
    return trained, fits


def train_binary_runs(
    chains: list[BinaryChainSettings],
    tied: bool,
    seeds: list[int],
    model: ModelSettings,
    training: TrainingSettings,
    optim: OptimSettings,
    law: InitialLaw,
    ctx: RunContext,
    detail: str = "",
) -> tuple[list[BinaryRun], TrainedEnsemble]:
    """Train every (chain, seed) pair for one tying choice as a single ensemble."""
    from lightning_modules import ChainMember  # imports Lightning: only where trained

    pairs = [(c, s) for c in chains for s in seeds]
    members = [ChainMember(binary_kernel(c.p, c.q), initial_law(c, law), s) for c, s in pairs]
    trained, fits = train_and_fit(members, 2, tied, model, training, optim, ctx, detail)
    probs = analysis.next_token_probs(trained.module, trained.test_tokens[:, :1])[:, 0, :, 1]
    norm_a, bias = analysis.binary_output_layer(trained.module)
    norm_z, a_dot_z = readout_geometry(trained.module.model, trained.test_tokens[:, :1, :-1])
    runs = [
        BinaryRun(
            chain=chain,
            tied=tied,
            seed=seed,
            **fit,
            sequence=trained.test_tokens[i, 0, :-1].numpy(),
            prob_one=probs[i],
            norm_a=float(norm_a[i]),
            bias=float(bias[i]),
            mean_norm_z=float(norm_z[i]),
            mean_abs_a_dot_z=float(a_dot_z[i]),
        )
        for i, ((chain, seed), fit) in enumerate(zip(pairs, fits, strict=True))
    ]
    return runs, trained


def ensemble_checkpoint(runs: list[BinaryRun], trained: TrainedEnsemble) -> dict:
    """What a later experiment needs to reuse a trained ensemble (e.g. App. D reuses Fig. 3)."""
    return {
        "config": trained.model.cfg.as_dict(),
        "members": [{"p": r.chain.p, "q": r.chain.q, "seed": r.seed} for r in runs],
        "state_dict": trained.module.model.state_dict(),
        "test_tokens": trained.test_tokens,
    }


def load_ensemble(checkpoint: dict) -> EnsembleGPT:
    """Rebuild a trained `EnsembleGPT` from `ensemble_checkpoint` output."""
    model = EnsembleGPT(GPTConfig(**checkpoint["config"]), len(checkpoint["members"]))
    model.load_state_dict(checkpoint["state_dict"])
    return model.eval()


def curves_frame(runs: list[BinaryRun], **extra: object) -> pd.DataFrame:
    """Tidy test-loss curves: one row per (run, evaluation step)."""
    frames = [
        pd.DataFrame(
            {
                "chain": r.chain.tag,
                "tying": r.tying,
                "seed": r.seed,
                **extra,
                "step": r.steps,
                "test_loss": r.test_loss,
            }
        )
        for r in runs
    ]
    return pd.concat(frames, ignore_index=True)


def chain_references(chain: BinaryChainSettings) -> Metrics:
    """Closed-form references of P(p, q) (paper A, Sec. 3)."""
    return {
        f"{chain.tag}/entropy_rate": binary_entropy_rate(chain.p, chain.q),
        f"{chain.tag}/unigram_entropy": binary_unigram_entropy(chain.p, chain.q),
        f"{chain.tag}/pi1": float(binary_stationary(chain.p, chain.q)[1]),
    }


# ----------------------------------------------------------------------------- multi-state chains
@dataclass
class StateRun(FittedRun):
    """One trained model on the symmetric S-state chain (paper A, journal version, Sec. 4.3)."""

    states: int
    p: float

    @property
    def p_stay(self) -> float:
        """Mean predicted P(x_{n+1} = x_n): 1 - p at the bigram, 1/S at the unigram."""
        return analysis.stay_probability(self.transition_means)


def train_symmetric_runs(
    states: int,
    ps: list[float],
    tied: bool,
    seeds: list[int],
    model: ModelSettings,
    training: TrainingSettings,
    optim: OptimSettings,
    ctx: RunContext,
) -> list[StateRun]:
    """Train every (p, seed) pair of the S-state symmetric chain for one tying as one ensemble.

    x_1 is uniform, which is the stationary law of the symmetric kernel (paper A,
    journal Sec. 4.3), as the authors' code draws it.
    """
    from lightning_modules import ChainMember  # imports Lightning: only where trained

    pairs = [(p, s) for p in ps for s in seeds]
    uniform = np.full(states, 1.0 / states)
    members = [ChainMember(symmetric_kernel(states, p), uniform, s) for p, s in pairs]
    _, fits = train_and_fit(
        members, states, tied, model, training, optim, ctx, detail=f"S={states} "
    )
    return [
        StateRun(states=states, p=p, tied=tied, seed=seed, **fit)
        for (p, seed), fit in zip(pairs, fits, strict=True)
    ]
