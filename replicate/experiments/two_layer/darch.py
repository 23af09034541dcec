"""Paper D's trainable model ("D-arch", App. H.5), its training and its evaluation.

D-arch (authors' code + ours): token embedding without absolute positions; layer 1 = one
causal softmax head with relative positions on keys and values (``value_rpe=False``: keys
only, the authors' code) followed by the three-sublayer MLP of App. B.1 (`MLP_three_layers`:
h1 = h0 + LN(ReLU(W1 h0 + b1)), h2 = h0 + LN(W2 h1), h3 = h2 + LN(W3 h2), affine LN;
``mlp="code"``: the four sublayers of the authors' `MLP_new_construct`); layer 2 = one
attention head without PE or MLP; untied readout with bias (``tied=True``: tied to the token
embedding, the code). The three switches at their code values give the authors' model
(the authors' `src/models/base.py`). The one-layer baseline of Table 2 is layer 1
+ MLP + readout.

Evaluation (App. H.2-H.3's loss gap; the set is ours): a fixed set of sequences, each with
its own Dirichlet(1) kernel, paired references on the same sequences: L_true (the true
kernel), the Laplace (add-1) order-k estimator (the Bayes predictor), the model's next-token
CE; attention maps from the forward traces.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from pydantic import Field

from lightning_modules import Member, NextTokenCE, OptimConfig
from lightning_modules.ensemble_gpt import EnsembleGPT
from lightning_modules.gpt_config import GPTConfig, LayerConfig, SublayerConfig
from replicate.analysis import kgram_estimate, match_matrix, next_token_nll, order_lags
from replicate.experiments.base import RunContext
from replicate.markov import InContextSource
from replicate.markov.incontext import true_next_token_nll
from replicate.settings import OptimSettings, PositiveInt, Strict, TrainingSettings
from replicate.training import TrainedEnsemble, TrainingPlan, gpt_ensemble, train_ensemble


class ArchSettings(Strict):
    """D-arch switches (docs/choices.md): the harness default or, switch by switch, the code's."""

    n_embd: PositiveInt
    value_rpe: bool  # relative PE on values too (paper's formalism) or keys only (code)
    mlp: Literal["app_b1", "code"]  # App. B.1's three sublayers or the code's four
    tied: bool  # readout tied to the token embedding (code) or untied (the paper, Sec. 2.2)
    init_std: float = Field(gt=0.0)


class ClippedOptimSettings(OptimSettings):
    """AdamW + one-cycle cosine (App. H.5) with per-member gradient clipping (authors' sweeps)."""

    clip_norm: float = Field(gt=0.0)


class EvalSettings(Strict):
    """The paired evaluation set (ours: 4096 sequences, ci 2000; one kernel each)."""

    sequences: PositiveInt
    seed: int = Field(ge=0)
    map_sequences: PositiveInt  # sequences whose attention maps are kept (traces are T x T)


MLP_SUBLAYERS: dict[str, tuple[SublayerConfig, ...]] = {
    # App. B.1 (`MLP_three_layers`): h1 = h0 + LN(ReLU(W1 h0 + b1)), h2 = h0 + LN(W2 h1),
    # h3 = h2 + LN(W3 h2).
    "app_b1": (
        SublayerConfig(bias=True, activation="relu", norm="affine", skip="prev"),
        SublayerConfig(activation="identity", norm="affine", skip="input"),
        SublayerConfig(activation="identity", norm="affine", skip="prev"),
    ),
    # The authors' `MLP_new_construct` (the module their `Block` wires in, `src/models/base.py`):
    # x += LN(ReLU(W1 x + b1)); x = ReLU(W2 x); x += LN'(ReLU(W3 x)); x += LN'(ReLU(W4 x)),
    # LN with a bias, LN' without.
    "code": (
        SublayerConfig(bias=True, activation="relu", norm="affine", skip="prev"),
        SublayerConfig(activation="relu", norm="none", skip="none"),
        SublayerConfig(activation="relu", norm="weight", skip="prev"),
        SublayerConfig(activation="relu", norm="weight", skip="prev"),
    ),
}


def darch_config(arch: ArchSettings, states: int, seq_len: int, layers: int) -> GPTConfig:
    """The D-arch `GPTConfig` with ``layers`` = 2 (the model) or 1 (Table 2's baseline)."""
    first = LayerConfig(
        n_head=1,
        rel_pe="key_value" if arch.value_rpe else "key",
        mlp="sublayers",
        sublayers=MLP_SUBLAYERS[arch.mlp],
    )
    second = LayerConfig(n_head=1, mlp="none")
    return GPTConfig(
        vocab_size=states,
        n_embd=arch.n_embd,
        block_size=seq_len,
        n_layer=layers,
        tied=arch.tied,
        init_std=arch.init_std,
        layers=(first, second)[:layers],
        position=False,
        final_norm="none",
        readout_bias=True,
    )


def optim_config(o: ClippedOptimSettings) -> OptimConfig:
    return OptimConfig(**o.model_dump())


def train_darch(
    cfg: GPTConfig,
    sources: list[InContextSource],
    seeds: list[int],
    training: TrainingSettings,
    optim: ClippedOptimSettings,
    ctx: RunContext,
    label: str,
) -> TrainedEnsemble:
    """Train one ensemble, member i on ``sources[i]`` from ``seeds[i]`` (NextTokenCE)."""
    plan = TrainingPlan(**training.model_dump())
    members = [Member(source, seed) for source, seed in zip(sources, seeds, strict=True)]
    return train_ensemble(
        gpt_ensemble(cfg, seeds),
        members,
        plan,
        optim_config(optim),
        ctx.label(label),
        objective=NextTokenCE(),
        context=ctx.training,
    )


def load_models(state: dict[str, torch.Tensor], cfg: GPTConfig) -> EnsembleGPT:
    """An `EnsembleGPT` with the saved ``state`` (its ensemble size read off the weights)."""
    model = EnsembleGPT(cfg, int(state["lm_head.bias"].shape[0]))
    model.load_state_dict(state)
    return model.eval()


@dataclass(frozen=True)
class EvalSet:
    """Paired evaluation sequences (T + 1 tokens) and their per-sequence references."""

    tokens: torch.Tensor  # (B, T + 1) what the model sees
    kernels: torch.Tensor  # (B, S**k, S) the clean kernel P of each sequence
    true_position_nll: torch.Tensor  # (B, T) L_true per position, on the clean path
    laplace_position_nll: torch.Tensor  # (B, T) add-1 order-k estimator on ``tokens``
    order: int

    @property
    def true_nll(self) -> torch.Tensor:
        """(B,) L_true: the per-position values' mean over positions."""
        return self.true_position_nll.mean(-1)

    @property
    def laplace_nll(self) -> torch.Tensor:
        """(B,) the add-1 order-k estimator's CE, mean over positions."""
        return self.laplace_position_nll.mean(-1)

    def match(self, count: int) -> torch.Tensor:
        """I_n of the inputs x_{1:T} of the first ``count`` sequences (B, T, T) (App. H.1)."""
        return match_matrix(self.tokens[:count, :-1], order_lags(self.order))


def laplace_position_nll(tokens: torch.Tensor, order: int, states: int) -> torch.Tensor:
    """(B, T) CE per position of the in-context add-1 order-``order`` estimator on (B, T + 1)
    ``tokens`` (the Bayes predictive under a uniform Dirichlet prior; Sec. 3)."""
    estimate = kgram_estimate(tokens, order_lags(order), states, alpha=1.0)
    return next_token_nll(estimate, tokens)


def eval_set(source: InContextSource, seq_len: int, e: EvalSettings) -> EvalSet:
    """Draw the evaluation set of ``source``; L_true uses the clean path and kernel P, the
    our clean-source reference for Tables 3/4 (= the usual L_true without noise)."""
    drawn = source.draw(e.sequences, seq_len + 1, torch.Generator().manual_seed(e.seed))
    return EvalSet(
        tokens=drawn.tokens,
        kernels=drawn.kernels,
        true_position_nll=true_next_token_nll(drawn.kernels, drawn.clean),
        laplace_position_nll=laplace_position_nll(drawn.tokens, source.order, source.states),
        order=source.order,
    )


@torch.no_grad()
def model_position_nll(
    model: torch.nn.Module, tokens: torch.Tensor, chunk: int = 500
) -> torch.Tensor:
    """(E, B, T) next-token CE of every member at every position of (B, T + 1) ``tokens``."""
    e = model.lm_head.bias.shape[0]
    parts = []
    for part in tokens.split(chunk):
        batch = part[None].expand(e, -1, -1)
        logp = model(batch[..., :-1]).double().log_softmax(-1)
        parts.append(-logp.gather(-1, batch[..., 1:, None]).squeeze(-1))
    return torch.cat(parts, dim=1)


def model_nll(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """(E, B) mean next-token CE per sequence of every member on (B, T + 1) ``tokens``."""
    return model_position_nll(model, tokens).mean(-1)


@torch.no_grad()
def attention_maps(model: torch.nn.Module, tokens: torch.Tensor) -> list[torch.Tensor]:
    """Per layer, the (E, B, T, T) attention of head 0 on the inputs x_{1:T} of ``tokens``."""
    e = model.lm_head.bias.shape[0]
    traces: list[dict[str, torch.Tensor]] = []
    model(tokens[None, :, :-1].expand(e, -1, -1), traces)
    return [t["attention"][:, :, 0].double() for t in traces]


def excess_stats(
    model: torch.nn.Module, data: EvalSet, first_position: int = 0
) -> dict[str, np.ndarray]:
    """Per member: excess CE (mean and standard error over sequences) and the Laplace one,
    over the positions from ``first_position`` on (0: every position, as for Table 2)."""
    true = data.true_position_nll[:, first_position:].mean(-1)
    excess = model_position_nll(model, data.tokens)[..., first_position:].mean(-1) - true
    laplace = data.laplace_position_nll[:, first_position:].mean(-1) - true
    n = excess.shape[1]
    return {
        "excess": excess.mean(1).numpy(),
        "excess_se": (excess.std(1) / np.sqrt(n)).numpy(),
        "laplace": np.full(excess.shape[0], float(laplace.mean())),
        "laplace_se": np.full(excess.shape[0], float(laplace.std() / np.sqrt(n))),
        "above_laplace_se": ((excess - laplace).std(1) / np.sqrt(n)).numpy(),
    }
