"""Atomic writers: a file is either the old version or the complete new one, never half."""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure


def _atomic(path: Path, write: Callable[[Path], None]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def write_json(path: Path, data: Any) -> None:
    """Write JSON (NaN/inf become null, so the file stays standard JSON)."""
    text = json.dumps(_json_safe(data), indent=2, sort_keys=False) + "\n"
    _atomic(path, lambda tmp: tmp.write_text(text))


def write_text(path: Path, text: str) -> None:
    _atomic(path, lambda tmp: tmp.write_text(text))


def write_csv(path: Path, frame: pd.DataFrame) -> None:
    _atomic(path, lambda tmp: frame.to_csv(tmp, index=False, float_format="%.6g"))


def write_torch(path: Path, obj: Any) -> None:
    """torch.save through a buffer: saved to a path, the archive's records are named after
    the (random) temporary file, and identical tensors would give different bytes."""
    import io as _io

    import torch

    buffer = _io.BytesIO()
    torch.save(obj, buffer)
    data = buffer.getvalue()
    _atomic(path, lambda tmp: tmp.write_bytes(data))


def save_figure(fig: Figure, path: Path) -> None:
    """Save a figure; PDFs carry no creation date so the bytes depend on the data only."""
    metadata = {"CreationDate": None} if path.suffix == ".pdf" else {"Software": None}
    _atomic(path, lambda tmp: fig.savefig(tmp, format=path.suffix[1:], metadata=metadata))
