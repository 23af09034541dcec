"""The one LightningModule that trains an ensemble of E independent models in one step.

The model is any `nn.Module` whose parameters all carry a leading ensemble axis E; the
objective (`lightning_modules.objectives`) turns a batch into the (E,) per-member losses.
The training loss is their *sum*, so each member's gradient is exactly its own; Adam(W)
and the schedules act elementwise, and gradient clipping is applied per member (Lightning's
``gradient_clip_val`` would clip the ensemble's joint norm and couple the members).

At step 0, every ``eval_every`` steps and at the end the module records, per member: the
test loss on the fixed test set, the minibatch gradient norm averaged over the steps since
the previous evaluation (paper C's logged ``gns``, App. I.3, the authors' code), the
population gradient norm with its noise floor when a gradient set is given (ours, not in
paper C), and any probes (callables of the model, e.g. attention offset masses). All of it,
with the global random state, is saved in Lightning checkpoints, so a run resumed from one
ends with the same numbers as an uninterrupted run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import lightning as L
import numpy as np
import torch
from torch import nn

from lightning_modules.measures import Probe, member_gradients, member_norms, population_grad_norm
from lightning_modules.objectives import NextTokenCE, Objective
from lightning_modules.optim import OptimConfig
from lightning_modules.sources import SequenceBatch


class EnsembleModule(L.LightningModule):
    def __init__(
        self,
        model: nn.Module,
        optim: OptimConfig,
        steps: int,
        test_batch: SequenceBatch,
        eval_every: int,
        eval_batch: int,
        objective: Objective | None = None,
        snapshot_steps: tuple[int, ...] = (),
        probes: Mapping[str, Probe] | None = None,
        gradient_set: SequenceBatch | None = None,
        gradient_chunks: int = 8,
    ) -> None:
        super().__init__()
        self.model = model
        self.objective: Objective = objective if objective is not None else NextTokenCE()
        self.optim, self.steps = optim, steps
        self.test_batch = test_batch
        self.eval_every, self.eval_batch = eval_every, eval_batch
        self.snapshot_steps = frozenset(snapshot_steps)
        self.snapshots: dict[int, dict[str, torch.Tensor]] = {}
        self.probes = dict(probes or {})
        self.gradient_set, self.gradient_chunks = gradient_set, gradient_chunks
        if gradient_set is not None and gradient_set.tokens.shape[1] < 2 * gradient_chunks:
            raise ValueError("the gradient set needs at least two sequences per chunk")
        self.history: dict[str, list[np.ndarray]] = {}
        self.eval_steps: list[int] = []
        self._grad_norm_sum: torch.Tensor | None = None
        self._grad_norm_count = 0
        self._ended_step = -1  # last step whose evaluation/snapshot work is done

    # ------------------------------------------------------------------ training
    def training_step(self, batch: SequenceBatch, batch_idx: int) -> torch.Tensor:
        losses = self.objective.loss(self.model, batch)
        self.log(
            "loss", losses.mean(), prog_bar=True, on_step=True, batch_size=batch.tokens.shape[1]
        )
        return losses.sum()

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Accumulate each member's (unclipped) minibatch gradient norm."""
        norms = member_norms([p.grad for p in self.model.parameters() if p.grad is not None])
        self._grad_norm_sum = norms if self._grad_norm_sum is None else self._grad_norm_sum + norms
        self._grad_norm_count += 1

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip each member's gradient to norm ``optim.clip_norm`` (torch's clip_grad_norm_
        rule, coefficient min(1, max_norm / (norm + 1e-6)), member by member)."""
        if self.optim.clip_norm is None:
            return
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        coef = (self.optim.clip_norm / (member_norms(grads) + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef.to(g.dtype).view(-1, *([1] * (g.ndim - 1))))

    def on_train_start(self) -> None:
        """Step 0 (initialisation); after a resume, the end of the checkpoint's step, which
        a checkpoint taken by a callback at that step has not seen yet (callbacks run before
        the module's ``on_train_batch_end``)."""
        self._end_step()

    def on_train_batch_end(self, outputs: object, batch: SequenceBatch, batch_idx: int) -> None:
        self._end_step()

    def _end_step(self) -> None:
        step = int(self.global_step)
        if step == self._ended_step:
            return
        if step % self.eval_every == 0 or step == self.steps:
            self._record_eval()
        self._snapshot()
        self._ended_step = step

    # ------------------------------------------------------------------ checkpoints
    def on_save_checkpoint(self, checkpoint: dict[str, object]) -> None:
        """Save the evaluation history, the gradient-norm accumulator, the snapshots and
        the global random state, so a resumed run ends exactly as an uninterrupted one.
        Arrays are stored as tensors (checkpoints load with ``weights_only``)."""
        checkpoint["ensemble_history"] = {
            "history": {
                name: [torch.from_numpy(np.ascontiguousarray(v)) for v in values]
                for name, values in self.history.items()
            },
            "eval_steps": list(self.eval_steps),
            "grad_norm_sum": self._grad_norm_sum,
            "grad_norm_count": self._grad_norm_count,
            "snapshots": self.snapshots,
            "ended_step": self._ended_step,
            "cpu_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        }

    def on_load_checkpoint(self, checkpoint: dict[str, object]) -> None:
        saved = checkpoint["ensemble_history"]
        assert isinstance(saved, dict), "checkpoint without the ensemble's history"
        self.history = {
            name: [v.numpy() for v in values] for name, values in saved["history"].items()
        }
        self.eval_steps = list(saved["eval_steps"])
        self._grad_norm_sum = saved["grad_norm_sum"]
        self._grad_norm_count = saved["grad_norm_count"]
        self.snapshots = saved["snapshots"]
        self._ended_step = saved["ended_step"]
        torch.set_rng_state(saved["cpu_rng"])
        if saved["cuda_rng"]:
            torch.cuda.set_rng_state_all(saved["cuda_rng"])

    # ------------------------------------------------------------------ evaluation
    def _snapshot(self) -> None:
        """Keep a CPU copy of every parameter at the requested steps (0 = initialisation)."""
        step = int(self.global_step)
        if step in self.snapshot_steps and step not in self.snapshots:
            self.snapshots[step] = {
                name: p.detach().to("cpu", copy=True) for name, p in self.model.named_parameters()
            }

    def _append(self, name: str, value: np.ndarray) -> None:
        self.history.setdefault(name, []).append(np.asarray(value))

    def _record_eval(self) -> None:
        self.eval_steps.append(int(self.global_step))
        self._append(
            "test_loss", self.objective.test_loss(self.model, self.test_batch, self.eval_batch)
        )
        self._append("grad_norm", self._minibatch_grad_norm())
        if self.gradient_set is not None:
            estimate, floor = population_grad_norm(
                self.model, self.objective, self.gradient_set, self.gradient_chunks
            )
            self._append("population_grad_norm", estimate)
            self._append("population_grad_floor", floor)
        for name, probe in self.probes.items():
            with torch.no_grad():
                self._append(name, probe(self.model))

    def _minibatch_grad_norm(self) -> np.ndarray:
        """Mean minibatch gradient norm since the last evaluation.

        Before the first step there is no training batch yet: the norm is then taken on the
        first ``eval_batch`` test sequences (a batch of the same distribution).
        """
        if self._grad_norm_sum is None:
            first = SequenceBatch(
                *(t if t is None else t[:, : self.eval_batch] for t in self.test_batch)
            )
            return member_norms(member_gradients(self.model, self.objective, first)).cpu().numpy()
        mean = (self._grad_norm_sum / self._grad_norm_count).cpu().numpy()
        self._grad_norm_sum, self._grad_norm_count = None, 0
        return mean

    # ------------------------------------------------------------------ optimiser
    def configure_optimizers(self):
        if hasattr(self.model, "decay_parameters"):
            decay, no_decay = self.model.decay_parameters()
        else:
            decay, no_decay = list(self.model.parameters()), []
        groups = [
            {"params": decay, "weight_decay": self.optim.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        opt: torch.optim.Optimizer
        if self.optim.algorithm == "sgd":
            opt = torch.optim.SGD(groups, lr=self.optim.lr)
        else:
            opt = torch.optim.AdamW(
                groups, lr=self.optim.lr, betas=(self.optim.beta1, self.optim.beta2)
            )
        if self.optim.schedule == "constant":
            return opt
        if self.optim.schedule == "onecycle_cosine":
            sched: torch.optim.lr_scheduler.LRScheduler = torch.optim.lr_scheduler.OneCycleLR(
                opt,
                max_lr=self.optim.lr,
                total_steps=self.steps,
                pct_start=self.optim.pct_start,
                anneal_strategy="cos",
                div_factor=self.optim.div_factor,
                final_div_factor=self.optim.final_div_factor,
                cycle_momentum=False,
            )
        else:
            sched = torch.optim.lr_scheduler.LambdaLR(opt, self._warmup_cosine)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def _warmup_cosine(self, step: int) -> float:
        """Linear warm-up over pct_start of the steps, then cosine decay to 0."""
        warmup = max(1, round(self.optim.pct_start * self.steps))
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, self.steps - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
