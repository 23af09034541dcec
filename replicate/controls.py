"""Negative controls: `python -m replicate controls`.

A claim about what training produces must be able to fail. This command runs the whole
suite at the active scale in a scratch clone of HEAD with learning switched off
(`replicate.provenance.LEARNING_ENV`: every training keeps its members, seeds, data,
schedule and evaluations, with a learning rate of 0, so each model stays at its
initialisation), evaluates every claim on those outputs, and writes the verdicts to
``claims/controls.json`` (`replicate.control_record`). A claim that still holds there is
satisfied by a model that learned nothing: it tests nothing about training.
"""

from __future__ import annotations

import datetime
import tempfile
import time
from pathlib import Path
from typing import Any

from replicate.checkout import clean_commit, cpu_model
from replicate.claim_files import load_claims
from replicate.control_record import (
    CONTROLS_FILE,
    definition_digest,
    reads_training,
    write_controls,
)
from replicate.params import PAPERS, Params
from replicate.provenance import LEARNING_ENV
from replicate.sources import paper_digest
from replicate.suite import Perturbation, run_suite

LEARNING_OFF = Perturbation(
    "learning switched off: every training with a learning rate of 0 (same members, seeds, "
    "data and evaluations), so each model stays at its initialisation",
    env={LEARNING_ENV: "off"},
)


def controls(
    params: Params, root: Path = Path("."), workdir: Path | None = None, cores: str = "all"
) -> Path:
    """Run the suite with learning switched off in a clone of HEAD and write each claim's
    control to ``claims/controls.json`` (the entries of other scales are kept)."""
    path = params.claims_dir / CONTROLS_FILE
    commit = clean_commit(root, path)
    claimset = load_claims(params)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="replicate-controls-") as scratch:
        log = root / "logs" / "controls" / f"negative-{params.scale}.log"
        where = workdir or Path(scratch)
        print(f"controls: running the suite at {params.scale} scale, {LEARNING_OFF.what} ...")
        records = {
            r.id: r
            for r in run_suite(
                root.resolve(), commit, "negative", LEARNING_OFF, where, cores, log, params.scale
            )
        }
    missing = [c.id for c in claimset.claims if c.id not in records]
    if missing:
        raise RuntimeError(f"the control run gave no verdict for {', '.join(missing)}")
    entry: dict[str, Any] = {
        "commit": commit,
        "date": datetime.datetime.now(datetime.UTC).date().isoformat(),
        "cpu": cpu_model(),
        "seconds": round(time.monotonic() - started),
        "code": {paper: paper_digest(paper, root) for paper in PAPERS},
        "claims": {
            c.id: {
                "definition": definition_digest(c),
                "reads_training": reads_training(params, c.experiment, params.scale),
                "verdict": records[c.id].own_verdict or records[c.id].verdict,
                "measured": records[c.id].measured,
                "seed_values": records[c.id].seed_values,
            }
            for c in claimset.claims
        },
    }
    write_controls(path, params.scale, entry)
    for claim in claimset.claims:
        row = entry["claims"][claim.id]
        if row["reads_training"] and row["verdict"] == "holds":
            kind = "expected (holds_untrained)" if claim.holds_untrained else claim.provenance
            print(f"  holds untrained: {claim.id} ({kind}), measured {row['measured']}")
    return path
