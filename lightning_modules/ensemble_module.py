"""LightningModule that trains an `EnsembleGPT` of E independent members in one step.

The training loss is the *sum* of the members' mean cross-entropies, so each member's
gradient is exactly its own (no coupling); AdamW and the OneCycle schedule act elementwise.
The module evaluates the fixed test set at step 0, every ``eval_every`` steps and at the
end, keeping the per-member test-loss history.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import lightning as L
import numpy as np
import torch

from lightning_modules.ensemble_gpt import EnsembleGPT, GPTConfig, per_member_cross_entropy


@dataclass(frozen=True)
class OptimConfig:
    """AdamW + OneCycle-cosine schedule (paper A, Table 2; schedule from the authors' code)."""

    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.95
    weight_decay: float = 1e-3
    schedule: str = "onecycle_cosine"
    pct_start: float = 0.02
    div_factor: float = 100.0
    final_div_factor: float = 0.05


@dataclass
class TestEvaluation:
    """Per-member test metrics: mean loss (E,) and conditional mean predictions (E, S, S).

    ``transition_means[e, i, j]`` is the model's mean predicted P(x_{n+1}=j) over test
    positions with x_n = i, e.g. f-bar_0 = [e, 0, 1] and q-hat = [e, 1, 0] (spec A, Sec. 4).
    """

    loss: np.ndarray
    transition_means: np.ndarray


class EnsembleLM(L.LightningModule):
    def __init__(
        self,
        cfg: GPTConfig,
        seeds: list[int],
        optim: OptimConfig,
        steps: int,
        test_tokens: torch.Tensor,
        eval_every: int,
        eval_batch: int = 16,
        snapshot_steps: tuple[int, ...] = (),
        initialize: Callable[[EnsembleGPT], None] | None = None,
    ) -> None:
        super().__init__()
        self.model = EnsembleGPT(cfg, len(seeds))
        self.model.init_members(seeds)
        if initialize is not None:
            with torch.no_grad():
                initialize(self.model)
        self.snapshot_steps = frozenset(snapshot_steps)
        self.snapshots: dict[int, dict[str, torch.Tensor]] = {}
        self.optim, self.steps = optim, steps
        self.test_tokens = test_tokens
        self.eval_every, self.eval_batch = eval_every, eval_batch
        self.eval_steps: list[int] = []
        self.eval_losses: list[np.ndarray] = []

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        losses = per_member_cross_entropy(self.model(batch[..., :-1]), batch[..., 1:])
        self.log("loss", losses.mean(), prog_bar=True, on_step=True, batch_size=batch.shape[1])
        return losses.sum()

    def on_train_start(self) -> None:
        self._record_eval()
        self._snapshot()

    def on_train_batch_end(self, outputs: object, batch: torch.Tensor, batch_idx: int) -> None:
        step = self.global_step
        if step % self.eval_every == 0 or step == self.steps:
            self._record_eval()
        self._snapshot()

    def _snapshot(self) -> None:
        """Keep a CPU copy of every parameter at the requested steps (0 = initialisation)."""
        step = int(self.global_step)
        if step in self.snapshot_steps and step not in self.snapshots:
            self.snapshots[step] = {
                name: p.detach().to("cpu", copy=True) for name, p in self.model.named_parameters()
            }

    def _record_eval(self) -> None:
        self.eval_steps.append(int(self.global_step))
        self.eval_losses.append(self.evaluate(self.test_tokens).loss)

    @torch.no_grad()
    def evaluate(self, tokens: torch.Tensor) -> TestEvaluation:
        """Loss and conditional mean predictions of every member on (E, T, N+1) ``tokens``."""
        vocab = self.model.cfg.vocab_size
        e = tokens.shape[0]
        loss_sum = torch.zeros(e, dtype=torch.float64, device=self.device)
        pred_sum = torch.zeros(e, vocab, vocab, dtype=torch.float64, device=self.device)
        counts = torch.zeros(e, vocab, dtype=torch.float64, device=self.device)
        for chunk in tokens.split(self.eval_batch, dim=1):
            chunk = chunk.to(self.device)
            inputs, targets = chunk[..., :-1], chunk[..., 1:]
            logits = self.model(inputs).double()
            loss_sum += per_member_cross_entropy(logits, targets) * inputs[0].numel()
            onehot = torch.nn.functional.one_hot(inputs, vocab).double()
            pred_sum += torch.einsum("ebni,ebnj->eij", onehot, logits.softmax(-1))
            counts += onehot.sum((1, 2))
        n_tokens = tokens[0, :, :-1].numel()
        means = pred_sum / counts.clamp(min=1).unsqueeze(-1)
        return TestEvaluation(
            loss=(loss_sum / n_tokens).cpu().numpy(), transition_means=means.cpu().numpy()
        )

    def configure_optimizers(self):
        decay, no_decay = self.model.decay_parameters()
        opt = torch.optim.AdamW(
            [
                {"params": decay, "weight_decay": self.optim.weight_decay},
                {"params": no_decay, "weight_decay": 0.0},
            ],
            lr=self.optim.lr,
            betas=(self.optim.beta1, self.optim.beta2),
        )
        if self.optim.schedule == "constant":
            return opt
        sched = torch.optim.lr_scheduler.OneCycleLR(
            opt,
            max_lr=self.optim.lr,
            total_steps=self.steps,
            pct_start=self.optim.pct_start,
            anneal_strategy="cos",
            div_factor=self.optim.div_factor,
            final_div_factor=self.optim.final_div_factor,
            cycle_momentum=False,
        )
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
