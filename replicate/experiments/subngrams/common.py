"""What paper C's experiments share: data settings, fixed sets, the k-gram losses of the
dashed lines and the training call (the drawing is `drawing`'s)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Annotated, Literal

import numpy as np
import pandas as pd
import torch
from pydantic import Field
from torch import nn

from lightning_modules import Member, OptimConfig, SequenceBatch
from lightning_modules.disentangled import DisentangledConfig, EnsembleDisentangled, HiddenSize
from lightning_modules.measures import Probe
from lightning_modules.objectives import LastTokenLawCE
from lightning_modules.seeding import member_generator
from replicate import settings
from replicate.analysis.kgram import kgram_estimate, paper_c_kgram_lags
from replicate.experiments.base import RunContext
from replicate.markov.incontext import InContextSource
from replicate.settings import PositiveInt, Strict
from replicate.training import TrainedEnsemble, TrainingContext, TrainingPlan, train_ensemble


class ChainSettings(Strict):
    """In-context n-gram prior (paper C, Sec. 2.2 and Sec. 5; the authors' `problems.py`).

    ``order`` is paper C's n (the next token depends on the previous n-1 tokens);
    ``initial`` = uniform first n-1 tokens as the authors' code, or a stationary window
    (paper C, App. H.1).
    """

    states: Annotated[int, Field(ge=2)]
    order: Annotated[int, Field(ge=2)]
    alpha: Annotated[float, Field(gt=0.0)]
    initial: Literal["uniform", "stationary"] = "uniform"

    @property
    def source(self) -> InContextSource:
        return InContextSource(self.states, self.order - 1, self.alpha, initial=self.initial)

    def at(self, seq_len: int) -> DataSettings:
        return DataSettings(**self.model_dump(), seq_len=seq_len)


class DataSettings(ChainSettings):
    """The prior plus the context length T (paper C, Sec. 2.1; the authors' code)."""

    seq_len: PositiveInt

    @property
    def tag(self) -> str:
        return f"S{self.states}_n{self.order}_T{self.seq_len}_a{self.alpha:g}"


def fixed_set(data: DataSettings, sequences: int, seed: int, stream: str) -> SequenceBatch:
    """(1, sequences, T) tokens and (1, sequences, S) next-token laws from ``seed``'s ``stream``."""
    tokens, law = data.source.sample(sequences, data.seq_len, member_generator(seed, stream))
    return SequenceBatch(tokens[None], law[None])


def expand(batch: SequenceBatch, ensemble: int, dtype: torch.dtype) -> SequenceBatch:
    """The same sequences for every member (common random numbers), laws in ``dtype``."""
    assert batch.next_law is not None
    tokens = batch.tokens.expand(ensemble, *batch.tokens.shape[1:])
    law = batch.next_law.to(dtype).expand(ensemble, *batch.next_law.shape[1:])
    return SequenceBatch(tokens, law)


def histories(order: int) -> list[tuple[int, ...]]:
    """Every lag set within the n-1 previous tokens, shortest first: () is the unigram,
    (1, ..., k-1) the k-gram of Def. 2.1, the others its non-contiguous variants (App. F.2)."""
    lags = range(1, order)
    return [h for size in range(order) for h in itertools.combinations(lags, size)]


def history_losses(batch: SequenceBatch, chain: ChainSettings, eps: float) -> pd.DataFrame:
    """Loss of the add-alpha estimator of every history on ``batch`` (1, N, T), with its
    Monte-Carlo standard error (paper C, Def. 2.1 and Fig. 1: the dashed lines of every figure).

    f = (N + alpha) / (sum N + S alpha), alpha = the Dirichlet alpha; keys i >= n-1 (the
    authors' code counts only positions whose full (n-1)-history exists), all T tokens for
    the unigram; loss -sum_s y_s log(f_s + eps) (`LastTokenLawCE.per_sequence`).
    """
    assert batch.next_law is not None
    tokens, law = batch.tokens[0], batch.next_law[0]
    objective = LastTokenLawCE(eps=eps)
    rows = []
    for lags in histories(chain.order):
        probs = kgram_estimate(
            tokens,
            lags,
            chain.states,
            alpha=chain.alpha,
            min_key=chain.order - 1 if lags else 0,
            last_position=True,
        )
        losses = objective.per_sequence(probs, law).numpy()
        contiguous = lags == paper_c_kgram_lags(len(lags) + 1)
        rows.append(
            {
                "history": history_label(lags),
                "k": len(lags) + 1 if contiguous else 0,
                "lags": len(lags),
                "loss": float(losses.mean()),
                "sem": float(losses.std(ddof=1) / np.sqrt(losses.size)),
            }
        )
    return pd.DataFrame(rows)


def estimator_laws(tokens: torch.Tensor, chain: ChainSettings) -> torch.Tensor:
    """(n, B, S) next-token laws of the add-alpha k-gram estimators, k = 1..n, at the last
    position of ``tokens`` (B, T): the estimators of `history_losses` (paper C, Def. 2.1)."""
    return torch.stack(
        [
            kgram_estimate(
                tokens,
                paper_c_kgram_lags(k),
                chain.states,
                alpha=chain.alpha,
                min_key=chain.order - 1 if k > 1 else 0,
                last_position=True,
            )
            for k in range(1, chain.order + 1)
        ]
    )


def estimator_distances(model_laws: torch.Tensor, laws: torch.Tensor) -> torch.Tensor:
    """(E, n, 2): per member and k, the mean over sequences of KL(p || f_k) and of the total
    variation 1/2 sum_s |p_s - f_k,s| between the model's law p (E, B, S) and the k-gram
    estimator's f_k (``laws`` (n, B, S)). KL in this direction is finite: the simplified
    model gives tokens absent from the context zero mass (0 log 0 = 0), the add-alpha
    estimators never do. Paper C, Sec. 5 ('the model behaves like a bigram estimator')."""
    p = model_laws.double()[:, None]
    f = laws.double()[None]
    kl = (torch.special.xlogy(p, p) - p * f.log()).sum(-1).mean(-1)
    tv = 0.5 * (p - f).abs().sum(-1).mean(-1)
    return torch.stack([kl, tv], dim=-1)


def estimator_distance_probe(probe: SequenceBatch, chain: ChainSettings) -> Probe:
    """Probe: `estimator_distances` (E, n, 2) of the model's last-position law on the
    ``probe`` sequences (1, B, T) at every evaluation."""
    tokens = probe.tokens[0]
    laws = estimator_laws(tokens, chain)

    def distances(model: nn.Module) -> np.ndarray:
        device = next(model.parameters()).device
        inputs = tokens.to(device).expand(model.ensemble, -1, -1)
        return estimator_distances(model(inputs).cpu(), laws).numpy()

    return distances


def history_label(lags: tuple[int, ...]) -> str:
    return "lags_" + ("none" if not lags else "_".join(str(h) for h in lags))


def kgram_levels(table: pd.DataFrame) -> np.ndarray:
    """b_1 > b_2 > ... > b_n: the add-alpha k-gram losses of `history_losses`, k = 1..n."""
    contiguous = table[table.k > 0].sort_values("k")
    return contiguous.loss.to_numpy()


def level_noise(table: pd.DataFrame) -> float:
    """The standard error of a loss on this test set: the largest Monte-Carlo standard error
    of the k-gram losses b_1..b_n of `history_losses` (our estimate puts it at about 0.005
    nats at 2^12 sequences). A model's loss on the same sequences has a spread like theirs;
    a plateau level closer than this to a band edge is called by noise."""
    return float(table[table.k > 0]["sem"].max())


# ----------------------------------------------------------------------------- training
class TrainingSettings(settings.TrainingSettings):
    """Steps, batch (paper C, Sec. 5, App. I.1), evaluation cadence (ours); ``seq_len`` is T."""

    gradset_sequences: Annotated[int, Field(ge=0)] = 0  # population gradient (ours)
    gradset_chunks: Annotated[int, Field(ge=2)] = 8


class OptimSettings(Strict):
    """optax.adamw(lr, weight_decay, b1=momentum=0) (the authors' code; paper C, Sec. 5
    says "Adam") with a constant rate, or with ``schedule = "cosine"`` the authors' train.py
    default for Fig. 7 (paper C, App. I.3), optax.cosine_decay_schedule(lr, steps): a cosine
    from lr to 0 over the run
    with no warm-up. It maps to ``warmup_cosine`` with ``pct_start = 0``: the rate is lr at
    steps 0 and 1, then a cosine over the remaining steps, ~0 at the last one (optax's runs
    at most a step ahead of it: the rates differ by at most lr * pi / (2 steps))."""

    lr: Annotated[float, Field(gt=0.0)]
    beta1: Annotated[float, Field(ge=0.0, lt=1.0)]
    beta2: Annotated[float, Field(ge=0.0, lt=1.0)]
    weight_decay: Annotated[float, Field(ge=0.0)]
    schedule: Literal["constant", "cosine"] = "constant"

    @property
    def config(self) -> OptimConfig:
        fields = self.model_dump(exclude={"schedule"})
        if self.schedule == "cosine":
            return OptimConfig(**fields, schedule="warmup_cosine", pct_start=0.0)
        return OptimConfig(**fields, schedule="constant")


def train(
    model: nn.Module,
    chain: ChainSettings,
    seeds: list[int],
    training: TrainingSettings,
    optim: OptimSettings,
    objective: LastTokenLawCE,
    probes: Mapping[str, Probe],
    label: str,
    context: TrainingContext,
) -> TrainedEnsemble:
    """Train one ensemble member per seed on fresh in-context batches (paper C, Sec. 2.1;
    a new batch each step is ours)."""
    plan = TrainingPlan(**training.model_dump())
    members = [Member(chain.source, seed) for seed in seeds]
    return train_ensemble(model, members, plan, optim.config, label, objective, probes, context)


def curves_frame(seeds: Sequence[int], steps: np.ndarray, **series: np.ndarray) -> pd.DataFrame:
    """Tidy per-seed curves: one row per (seed, evaluation step), one column per (E, n) series."""
    return pd.DataFrame(
        [
            {"seed": seed, "step": int(t), **{k: float(v[i, j]) for k, v in series.items()}}
            for i, seed in enumerate(seeds)
            for j, t in enumerate(steps)
        ]
    )


def member_test_set(trained: TrainedEnsemble, member: int = 0) -> SequenceBatch:
    """Member ``member``'s slice (1, N, T) of the test set (shared by equal sources)."""
    batch = trained.test_batch
    assert batch.next_law is not None
    return SequenceBatch(batch.tokens[member : member + 1], batch.next_law[member : member + 1])


def train_simplified(
    chain: ChainSettings,
    hidden: HiddenSize,
    seeds: list[int],
    training: TrainingSettings,
    optim: OptimSettings,
    eps: float,
    probes: Mapping[str, Probe],
    ctx: RunContext,
) -> TrainedEnsemble:
    """The simplified model (paper C, Sec. 2.3), one member per seed, trained as one ensemble."""
    cfg = DisentangledConfig(chain.states, chain.order - 1, training.seq_len, hidden=hidden)
    model = EnsembleDisentangled(cfg, len(seeds))
    model.init_members(seeds)
    objective = LastTokenLawCE(eps=eps)
    label = ctx.label(f"{len(seeds)} seeds")
    return train(model, chain, seeds, training, optim, objective, probes, label, ctx.training)


def seed_column(per_seed: Iterable[Mapping[str, float]], key: str) -> np.ndarray:
    """One per-seed value across the seeds, NaN where a seed has none."""
    return np.array([values.get(key, math.nan) for values in per_seed], dtype=float)


def over_seeds(reduce: Callable[[np.ndarray], float], values: np.ndarray) -> float:
    """``reduce`` (np.nanmean, np.nanmedian, np.nanmax: NaN marks a seed without the event,
    e.g. no plateau in a short run) over the seeds' values; NaN when no seed has one, without
    NumPy's warning about an all-NaN slice."""
    return math.nan if np.isnan(values).all() else float(reduce(values))


NO_EVENT = 0.0
"""A per-seed measure of an event (the second plateau, a transition) in a seed where the
event did not happen; the seed's indicator of the event (``has_second_plateau``,
``made_transition``, ...) is then 0. The claims on the event read only the seeds where it
happened (``per_seed.only``), and with none have no subject (``inconclusive``: an absent
event is an outcome of the run, not a fault); but `replicate.claims.seed_matrix` needs a
finite number at every seed, so NaN here would make them ``missing``."""


def without_event(keys: Iterable[str]) -> dict[str, float]:
    """`NO_EVENT` for each of the per-seed measures ``keys`` of an event that did not happen."""
    return dict.fromkeys(keys, NO_EVENT)


def over_event_seeds(
    reduce: Callable[[np.ndarray], float], values: np.ndarray, happened: np.ndarray
) -> float:
    """``reduce`` over the values of the seeds where the event happened (boolean
    ``happened``, the seeds' indicators); NaN when it happened in none (the claims on it
    then have no subject, `NO_EVENT`)."""
    kept = values[happened]
    return float(reduce(kept)) if kept.size else math.nan
