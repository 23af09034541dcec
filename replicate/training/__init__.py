"""Training ensembles of models: the plan and the trained ensemble (`ensemble`), what a
training takes from outside its settings (`context`), the Trainer call (`trainer`), its
checkpoints (`checkpoints`), chunks of members (`chunking`) and Lightning callbacks
(`callbacks`, imported only where a training runs)."""

from replicate.training.context import (
    Calibration,
    CheckpointScope,
    DeviceSettings,
    TrainingContext,
    TrainingCost,
    configure_torch,
)
from replicate.training.ensemble import TrainedEnsemble, TrainingPlan, gpt_ensemble
from replicate.training.trainer import train_ensemble

__all__ = [
    "Calibration",
    "CheckpointScope",
    "DeviceSettings",
    "TrainedEnsemble",
    "TrainingContext",
    "TrainingCost",
    "TrainingPlan",
    "configure_torch",
    "gpt_ensemble",
    "train_ensemble",
]
