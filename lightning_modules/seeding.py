"""Named random streams per ensemble member: one seed, many independent generators.

A member's initialisation, training data, test set and gradient set each come from their
own stream, so changing how often one is drawn never shifts another, and member i's
streams depend on its seed alone (hence an ensemble of E equals E separate runs).
"""

from __future__ import annotations

import numpy as np
import torch

STREAMS: tuple[str, ...] = ("init", "train", "test", "prior", "gradset", "memory")
"""Stream names; a stream's id is its index. Append new names: existing ids never change."""


def member_seed(seed: int, stream: str) -> int:
    """A 63-bit seed for one named random stream of a member (``STREAMS``)."""
    if stream not in STREAMS:
        raise ValueError(f"unknown random stream {stream!r}; known: {', '.join(STREAMS)}")
    stream_id = STREAMS.index(stream)
    return int(np.random.SeedSequence([seed, stream_id]).generate_state(2, np.uint64)[0] >> 1)


def member_generator(seed: int, stream: str) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded for ``stream`` of the member with ``seed``."""
    return torch.Generator().manual_seed(member_seed(seed, stream))
