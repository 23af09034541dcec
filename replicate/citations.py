"""Measured values cited in a claim's prose, never typed into it.

A claim's ``note`` and an expectation's ``reason`` explain a verdict with what was measured.
Such a number, typed by hand, goes stale at the next run and can contradict the table beside
it. Instead the prose names the metric: ``[[k3/seed0/excess]]`` (a key of the claim's
experiment's metrics.json). ``python -m replicate expect`` stores the value of every cited key
beside the recording (`replicate.claim_files.Recording.cited`), from the same outputs as the
verdict, and REPORT.md prints the text with those values (`render`). A cited key that the
experiment does not write refuses the recording.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping

CITATION = re.compile(r"\[\[([^\[\]\s]+)\]\]")
"""``[[metric key]]`` in a claim's prose."""


def cited_keys(texts: Iterable[str | None]) -> list[str]:
    """The metric keys the texts cite, in order of first appearance, each once."""
    keys: dict[str, None] = {}
    for text in texts:
        for match in CITATION.finditer(text or ""):
            keys.setdefault(match.group(1))
    return list(keys)


def cited_value_text(value: float | None) -> str:
    """A cited value with four significant digits (integers as integers)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if float(value).is_integer() and abs(value) < 1e6:
        return str(int(value))
    return f"{value:.4g}"


def render(text: str, values: Mapping[str, float | None] | None) -> str:
    """``text`` with each ``[[key]]`` replaced by its recorded value, or by
    ```key` (not recorded)`` where no recording holds it."""

    def value_of(match: re.Match[str]) -> str:
        key = match.group(1)
        if values is None or key not in values:
            return f"`{key}` (not recorded)"
        return cited_value_text(values[key])

    return CITATION.sub(value_of, text)
