"""Analysis shared by every paper: run-level oracles and classes (`runs`), in-context k-gram
estimators (`kgram`), attention statistics (`attention`) and the plateau detector
(`plateaus`). Each is written once; experiments import them from here."""

from replicate.analysis.attention import (
    ModelState,
    frobenius_distance,
    head_on_offset,
    matched_mass,
    matched_mass_chance,
    model_state,
    offset_masses,
    shift_match,
)
from replicate.analysis.kgram import (
    add_alpha,
    kgram_counts,
    kgram_estimate,
    match_matrix,
    next_token_nll,
    order_lags,
    paper_c_kgram_lags,
    pseudo_attention_map,
    soft_cross_entropy,
)
from replicate.analysis.plateaus import (
    Plateau,
    Transition,
    assign_level,
    detect_plateaus,
    running_median,
    transitions,
)
from replicate.analysis.runs import (
    RunClass,
    binary_output_layer,
    classify,
    first_positions,
    first_step_reaching,
    gap_closed,
    next_token_probs,
    oracle_losses,
    stay_probability,
)

__all__ = [
    "ModelState",
    "Plateau",
    "RunClass",
    "Transition",
    "add_alpha",
    "assign_level",
    "binary_output_layer",
    "classify",
    "detect_plateaus",
    "first_positions",
    "first_step_reaching",
    "frobenius_distance",
    "gap_closed",
    "head_on_offset",
    "kgram_counts",
    "kgram_estimate",
    "match_matrix",
    "matched_mass",
    "matched_mass_chance",
    "model_state",
    "next_token_nll",
    "next_token_probs",
    "offset_masses",
    "oracle_losses",
    "order_lags",
    "paper_c_kgram_lags",
    "pseudo_attention_map",
    "running_median",
    "shift_match",
    "soft_cross_entropy",
    "stay_probability",
    "transitions",
]
