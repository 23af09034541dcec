"""The user's cache of facts the harness derives from its own files and can always derive
again: ``$XDG_CACHE_HOME/markov-replicate/<kind>/`` (default ``~/.cache``).

Every entry is named by a hash of everything it depends on, so an entry is never stale, only
unused. Entries are written whole (a temporary file renamed into place) and on a best-effort
basis: a cache that cannot be written or read only means deriving the fact again. Deleting
the folder is always safe.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def cache_dir(kind: str) -> Path:
    """The folder of the cache's entries of ``kind`` (not created here)."""
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "markov-replicate" / kind


def read_entry(kind: str, key: str) -> str | None:
    """The text of entry ``key`` of ``kind``, or None when it is absent or unreadable."""
    try:
        return (cache_dir(kind) / key).read_text()
    except (OSError, UnicodeDecodeError):
        return None


def write_entry(kind: str, key: str, text: str) -> None:
    """Store ``text`` as entry ``key`` of ``kind``, whole or not at all (concurrent writers of
    one key write the same text: the last rename wins)."""
    folder = cache_dir(kind)
    tmp = folder / f".{key}.{secrets.token_hex(4)}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text)
        os.replace(tmp, folder / key)
    except OSError:
        tmp.unlink(missing_ok=True)
