"""Building blocks of the experiments' settings schemas.

The strict base model, constrained numbers and the settings blocks that several experiments
share (model shape, training length, optimiser, binary chain). Experiments declare their
settings models with these; `replicate.config` validates params.yaml against those models.
Nothing here reads a file or knows an experiment.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]
NonNegativeFloat = Annotated[float, Field(ge=0.0)]
OpenUnit = Annotated[float, Field(gt=0.0, lt=1.0)]


class ModelSettings(Strict):
    """Transformer shape and variant (paper A, Sec. 2.1, Tables 1-2; docs/choices.md)."""

    variant: Literal["theory", "gpt2"]
    activation: Literal["relu", "gelu"]
    n_embd: PositiveInt
    n_layer: PositiveInt
    n_head: PositiveInt
    mlp_ratio: PositiveInt
    init_std: Annotated[float, Field(gt=0.0)]


class TrainingSettings(Strict):
    steps: PositiveInt
    batch_size: PositiveInt
    seq_len: PositiveInt
    eval_every: PositiveInt
    test_sequences: PositiveInt
    test_seed: Annotated[int, Field(ge=0)]


class OptimSettings(Strict):
    lr: Annotated[float, Field(gt=0.0)]
    beta1: Annotated[float, Field(ge=0.0, lt=1.0)]
    beta2: Annotated[float, Field(ge=0.0, lt=1.0)]
    weight_decay: Annotated[float, Field(ge=0.0)]
    schedule: Literal["onecycle_cosine", "constant"]
    pct_start: OpenUnit
    div_factor: Annotated[float, Field(gt=0.0)]
    final_div_factor: Annotated[float, Field(gt=0.0)]


class BinaryChainSettings(Strict):
    """P(p, q): p flips 0 -> 1, q flips 1 -> 0 (paper A, Sec. 2.2)."""

    p: OpenUnit
    q: OpenUnit

    @property
    def tag(self) -> str:
        return f"p{self.p:g}_q{self.q:g}"
