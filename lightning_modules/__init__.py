"""Models (`nn.Module`s with a leading ensemble axis), objectives, the ensemble
LightningModule and the DataModule over the samplers.

Every public name is importable from here; each submodule is imported on first use
(PEP 562), so code that only builds a model starts without importing Lightning.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lightning_modules.ensemble_gpt import EnsembleGPT
    from lightning_modules.ensemble_module import EnsembleModule
    from lightning_modules.gpt_config import GPTConfig, LayerConfig, SublayerConfig
    from lightning_modules.markov_data import MarkovEnsembleData
    from lightning_modules.objectives import (
        BinaryLogitCE,
        LastTokenLawCE,
        NextTokenCE,
        Objective,
        TestEvaluation,
        evaluate_next_token,
        per_member_cross_entropy,
    )
    from lightning_modules.optim import OptimConfig
    from lightning_modules.seeding import member_generator, member_seed
    from lightning_modules.sources import ChainMember, FixedChain, Member, SequenceBatch, Source

_SUBMODULE = {
    "EnsembleGPT": "ensemble_gpt",
    "GPTConfig": "gpt_config",
    "LayerConfig": "gpt_config",
    "SublayerConfig": "gpt_config",
    "EnsembleModule": "ensemble_module",
    "OptimConfig": "optim",
    "ChainMember": "sources",
    "FixedChain": "sources",
    "MarkovEnsembleData": "markov_data",
    "Member": "sources",
    "SequenceBatch": "sources",
    "Source": "sources",
    "BinaryLogitCE": "objectives",
    "LastTokenLawCE": "objectives",
    "NextTokenCE": "objectives",
    "Objective": "objectives",
    "TestEvaluation": "objectives",
    "evaluate_next_token": "objectives",
    "per_member_cross_entropy": "objectives",
    "member_generator": "seeding",
    "member_seed": "seeding",
}


def __getattr__(name: str) -> Any:
    if name not in _SUBMODULE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_SUBMODULE[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_SUBMODULE])


__all__ = [
    "BinaryLogitCE",
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
