"""Atomic writers: a file is either the old version or the complete new one, never half.

`read_json_object` is the one reader of the harness's JSON-object files (metrics.json,
provenance.json): one error line naming the file for anything unusable.

A writer first writes a temporary file next to its target, named ``TEMP_PREFIX`` +
``<name>.<random><suffix>``, and renames it over the target. A process killed in between
leaves that temporary file behind; `remove_stale_temps` deletes such leftovers (each
experiment run calls it on its own output folder before it writes). Outputs get the user's
normal file mode (0o666 less the umask), as ``open`` would give them.
"""

from __future__ import annotations

import json
import math
import os
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TEMP_PREFIX = ".replicate-tmp."
"""Every temporary file of these writers starts with this; no output does."""
_CREATE_ATTEMPTS = 100


def _temp_file(path: Path) -> Path:
    """A new, empty temporary file next to ``path``. Created with mode 0o666, which the
    kernel reduces by the umask (`tempfile.mkstemp` would give 0o600 whatever the umask)."""
    for _ in range(_CREATE_ATTEMPTS):
        tmp = path.parent / f"{TEMP_PREFIX}{path.name}.{secrets.token_hex(4)}{path.suffix}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        os.close(fd)
        return tmp
    raise FileExistsError(f"no free temporary name next to {path}")


def _atomic(path: Path, write: Callable[[Path], None]) -> None:
    """Write ``path`` through ``write`` on a temporary file. An operating-system error (a
    full disk, a read-only folder) names ``path``, not the temporary file or nothing."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _temp_file(path)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def remove_stale_temps(directory: Path, recursive: bool = False) -> list[Path]:
    """Delete the temporary files (``TEMP_PREFIX*``) that killed writers left in
    ``directory`` (and its subfolders when ``recursive``); return what was deleted.

    Call it only on a folder that no other running process writes to (an experiment's own
    output folder at the start of its run): a live writer's temporary file looks the same.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return []
    pattern = f"{TEMP_PREFIX}*"
    found = directory.rglob(pattern) if recursive else directory.glob(pattern)
    removed = sorted(p for p in found if p.is_file())
    for p in removed:
        p.unlink(missing_ok=True)
    return removed


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


def save_drawn_png(fig: Figure, path: Path) -> None:
    """Write the pixels of ``fig``'s last draw on its Agg canvas as a PNG, without drawing
    it again: the bytes `save_figure` writes for a PNG, which draws first
    (`FigureCanvasAgg.print_png` is that draw, then this write). Call it right after a draw
    at the figure's own resolution (`replicate.plotting.layout_problems` draws one)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.image import imsave

    canvas = fig.canvas
    if not isinstance(canvas, FigureCanvasAgg) or getattr(canvas, "renderer", None) is None:
        raise ValueError(f"{path}: the figure has not been drawn on an Agg canvas")
    pixels = canvas.buffer_rgba()
    metadata = {"Software": None}
    _atomic(
        path,
        lambda tmp: imsave(
            tmp, pixels, format="png", origin="upper", dpi=fig.dpi, metadata=metadata
        ),
    )


class MalformedFile(ValueError):
    """An output file that exists but cannot be used; the message names the file."""


JSON_TYPE_NAMES = {list: "an array", str: "a string", int: "a number", float: "a number"}


def read_json_object(path: Path, shown: Path | None = None) -> dict[str, Any]:
    """The JSON object in ``path``.

    Raises FileNotFoundError when it is absent, else `MalformedFile` (one line naming
    ``shown``, default ``path``) when it cannot be read, is not valid JSON or holds no
    object. Python's json also reads the non-standard tokens NaN and ±Infinity; such values
    are judged per metric (`metric_value`).
    """
    name = shown or path
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise
    except UnicodeDecodeError as exc:
        raise MalformedFile(f"{name}: not UTF-8 text (byte {exc.start})") from exc
    except OSError as exc:
        raise MalformedFile(f"{name}: cannot be read ({exc.strerror})") from exc
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        where = (
            f"line {exc.lineno}, column {exc.colno}: {exc.msg}"
            if isinstance(exc, json.JSONDecodeError)
            else "nested too deeply"
        )
        raise MalformedFile(f"{name}: not valid JSON ({where})") from exc
    if not isinstance(data, dict):
        kind = JSON_TYPE_NAMES.get(type(data), "null" if data is None else "a boolean")
        raise MalformedFile(f"{name}: not a JSON object (it holds {kind})")
    return data
