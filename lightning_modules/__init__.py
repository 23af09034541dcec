"""Models (`nn.Module`s with a leading ensemble axis), objectives, the ensemble
LightningModule and the DataModule over the samplers."""

from lightning_modules.ensemble_gpt import EnsembleGPT, GPTConfig, LayerConfig, SublayerConfig
from lightning_modules.ensemble_module import EnsembleModule, OptimConfig
from lightning_modules.markov_data import (
    ChainMember,
    FixedChain,
    MarkovEnsembleData,
    Member,
    SequenceBatch,
    Source,
)
from lightning_modules.objectives import (
    LastTokenLawCE,
    NextTokenCE,
    Objective,
    TestEvaluation,
    evaluate_next_token,
    per_member_cross_entropy,
)
from lightning_modules.seeding import member_generator, member_seed

__all__ = [
    "ChainMember",
    "EnsembleGPT",
    "EnsembleModule",
    "FixedChain",
    "GPTConfig",
    "LastTokenLawCE",
    "LayerConfig",
    "MarkovEnsembleData",
    "Member",
    "NextTokenCE",
    "Objective",
    "OptimConfig",
    "SequenceBatch",
    "Source",
    "SublayerConfig",
    "TestEvaluation",
    "evaluate_next_token",
    "member_generator",
    "member_seed",
    "per_member_cross_entropy",
]
