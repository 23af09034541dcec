"""Models (`nn.Module`s), the ensemble LightningModule and the Markov DataModule."""

from lightning_modules.ensemble_gpt import EnsembleGPT, GPTConfig, per_member_cross_entropy
from lightning_modules.ensemble_module import EnsembleLM, OptimConfig, TestEvaluation
from lightning_modules.markov_data import ChainMember, MarkovEnsembleData

__all__ = [
    "ChainMember",
    "EnsembleGPT",
    "EnsembleLM",
    "GPTConfig",
    "MarkovEnsembleData",
    "OptimConfig",
    "TestEvaluation",
    "per_member_cross_entropy",
]
