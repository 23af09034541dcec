"""Paper C's simplified disentangled transformer: forward pass and loss by hand (Sec. 2.3)."""

from __future__ import annotations

import numpy as np
import torch

from lightning_modules import LastTokenLawCE, SequenceBatch
from lightning_modules.disentangled import DisentangledConfig, EnsembleDisentangled
from replicate.experiments.subngrams.common import (
    ChainSettings,
    estimator_distances,
    estimator_laws,
)


def _by_hand(model: EnsembleDisentangled, member: int, x: list[int]) -> np.ndarray:
    """Paper C's Sec. 2.3 forward pass with explicit loops over positions (one sequence)."""
    a1, v1 = model.A1[member].detach().numpy(), model.V1[member].detach().numpy()
    q, kt = model.Q[member].detach().numpy(), model.Kt[member].detach().numpy()
    s, t = model.states, len(x)
    r0 = np.eye(s)[x]
    r1 = []
    for pos in range(t):
        blocks = [r0[pos]]
        for h in range(model.heads):
            logits = a1[h, pos, : pos + 1]
            alpha = np.exp(logits - logits.max())
            alpha /= alpha.sum()
            blocks.append((alpha @ r0[: pos + 1]) @ v1[h])
        r1.append(np.concatenate(blocks))
    r1 = np.array(r1)
    scores = np.array([r1[-1] @ q @ kt @ r1[i] for i in range(t)])
    a2 = np.exp(scores - scores.max())
    a2 /= a2.sum()
    return a2 @ r0


def _model(hidden: str) -> EnsembleDisentangled:
    model = EnsembleDisentangled(
        DisentangledConfig(states=3, heads=2, seq_len=7, hidden=hidden), 2, torch.float64
    )
    model.init_members([4, 5])
    with torch.no_grad():
        model.A1.normal_(generator=torch.Generator().manual_seed(0))  # non-uniform layer 1
    return model


def test_forward_and_loss_match_hand_computation() -> None:
    for hidden in ("S", "D"):
        model = _model(hidden)
        assert model.Q.shape[-1] == (3 if hidden == "S" else 9)
        tokens = torch.tensor([[[0, 2, 1, 1, 0, 2, 2], [1, 1, 1, 0, 0, 2, 1]]]).expand(2, -1, -1)
        law = torch.tensor([[[0.2, 0.5, 0.3], [0.0, 0.9, 0.1]]], dtype=torch.float64).expand(
            2, -1, -1
        )
        probs = model(tokens)
        eps = 1e-8
        losses = LastTokenLawCE(eps=eps).loss(model, SequenceBatch(tokens, law))
        for e in range(2):
            hand = np.array([_by_hand(model, e, tokens[e, b].tolist()) for b in range(2)])
            np.testing.assert_allclose(probs[e].detach().numpy(), hand, atol=1e-12)
            hand_loss = np.mean(-(law[e].numpy() * np.log(hand + eps)).sum(-1))
            np.testing.assert_allclose(losses[e].item(), hand_loss, atol=1e-12)


def test_absent_tokens_get_zero_mass() -> None:
    """The output is a convex combination of context tokens (paper C, Eq. (9))."""
    model = _model("S")
    probs = model(torch.tensor([[[0, 1, 0, 1, 1, 0, 0]]]).expand(2, -1, -1))
    assert (probs[..., 2] == 0).all()
    np.testing.assert_allclose(probs.sum(-1).detach().numpy(), 1.0, atol=1e-12)


def test_initialisation_follows_the_authors_code() -> None:
    model = EnsembleDisentangled(DisentangledConfig(states=5, heads=2, seq_len=32, hidden="D"), 3)
    model.init_members([0, 1, 2])
    assert (model.A1 == 0).all()  # uniform causal attention at init
    assert not torch.equal(model.V1[0], model.V1[1])  # members differ
    d = model.width
    assert abs(model.Q.detach().var().item() * d - 1.0) < 0.2  # N(0, 1/D)
    assert abs(model.V1.detach().var().item() * 5 - 1.0) < 0.3  # N(0, 1/S)


def test_estimator_distances_name_the_estimator_a_model_copies() -> None:
    """The unigram law is the add-alpha frequency of all T tokens (by hand); a model that
    returns an estimator's law is at distance 0 from it and nearest to it; the KL and total
    variation of one sequence match their definitions."""
    chain = ChainSettings(states=3, order=3, alpha=0.5)
    tokens, _ = chain.source.sample(64, 16, torch.Generator().manual_seed(0))
    laws = estimator_laws(tokens, chain)
    assert laws.shape == (3, 64, 3)
    counts = np.stack([np.bincount(row, minlength=3) for row in tokens.numpy()])
    np.testing.assert_allclose(laws[0].numpy(), (counts + 0.5) / (16 + 1.5), rtol=1e-12)
    np.testing.assert_allclose(laws.sum(-1).numpy(), 1.0, rtol=1e-12)

    copies = torch.stack([laws[1], laws[0], laws[2]])  # bigram, unigram, trigram
    distances = estimator_distances(copies, laws)
    assert distances.shape == (3, 3, 2)
    assert distances[:, :, 0].argmin(1).tolist() == [1, 0, 2]
    assert distances[:, :, 1].argmin(1).tolist() == [1, 0, 2]
    for member, k in enumerate([1, 0, 2]):
        assert distances[member, k].abs().max() < 1e-15

    # one member, one sequence, one estimator; the model gives the third token no mass
    p = torch.tensor([[[0.5, 0.5, 0.0]]], dtype=torch.float64)
    f = torch.tensor([[[0.2, 0.3, 0.5]]], dtype=torch.float64)
    kl, tv = estimator_distances(p, f)[0, 0].tolist()
    assert abs(kl - (0.5 * np.log(0.5 / 0.2) + 0.5 * np.log(0.5 / 0.3))) < 1e-12
    assert abs(tv - 0.5) < 1e-12
