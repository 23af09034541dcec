"""Parameter counts of paper D's constructions and of prior ones (Table 1, App. I).

Paper D, Table 1 and App. I ("Parameter breakdown and comparison"); the formulas are
stripped from our copy of the paper, so the component list of App. I is applied to the
layouts of our constructions (`constructions`):

* token embedding S d;
* per attention layer: relative PE T d per table, Q/K/V 3 H d^2, output projection H d^2
  when H > 1;
* per MLP matrix d^2, plus d for each matrix that has a bias; every layer norm 2 d
  (standard affine-LN accounting, although the modified LN v / ||v|| has no parameters);
* output projection S d + S.

Two choices differ from a literal reading of App. I's list (separate key and value PE
tables, a bias on every MLP matrix), so that the counts are those of the tensors the harness
materialises (`constructions.build`; D-T1-3):

* one relative-PE table per head is shared by keys and values (the authors' code projects
  one `nn.Embedding(T, d)` through c_attn for both, `src/models/base.py`);
  ``separate_value_tables`` gives the literal reading (2 T d per head of a layer with value PE);
* a bias is counted only where the construction has one (sublayer 1 of the 2L1H MLP,
  D-CON-4; both FFN matrices of Rajaraman et al.), not on every MLP matrix.

`ARCHITECTURES` names the rows of Table 1 the harness can count; Bietti et al. '23 and
Edelman et al. '24 are listed in `UNCOUNTED` (their architectures are not specified here).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

COMPONENTS = (
    "token_embedding",
    "positional_encoding",
    "attention",
    "mlp_weights",
    "mlp_biases",
    "layer_norms",
    "output",
)
"""App. I's component rows (Q/K/V and the multi-head output projection as "attention")."""


@dataclass(frozen=True)
class LayerShape:
    """One transformer layer as App. I counts it."""

    heads: int
    pe: str = "none"  # relative PE: "none", "key" or "key_value"
    mlp_matrices: int = 0  # d x d matrices
    mlp_biases: int = 0  # of which have a bias
    layer_norms: int = 0  # in the MLP, or after the query and key maps


@dataclass(frozen=True)
class Architecture:
    """A construction: its Table 1 row, its width d(S, k) and its layers."""

    label: str
    prior_work: str
    order: str
    shape: str
    width: Callable[[int, int], int]
    layers: Callable[[int], tuple[LayerShape, ...]]


def _ours_width(states: int, order: int) -> int:
    """d = 6S + 4 (our layout: four scalar slots and six S-blocks)."""
    return 6 * states + 4


ARCHITECTURES: dict[str, Architecture] = {
    "ours_2l1h": Architecture(
        "Ours (Sec. 4, App. B.1)",
        "this paper",
        "k",
        "2-layer 1-head, 3-sublayer MLP",
        _ours_width,
        lambda k: (LayerShape(1, "key_value", 3, 1, 3), LayerShape(1)),
    ),
    "ours_b2": Architecture(
        "Ours (App. B.2, LN after Q and K)",
        "this paper",
        "k",
        "2-layer 1-head, 2-sublayer MLP",
        lambda s, k: 5 * s + 4,  # no u-hat / v-hat blocks (App. B.2)
        lambda k: (LayerShape(1, "key_value", 2, 1, 2), LayerShape(1, layer_norms=2)),
    ),
    "ours_2l2h": Architecture(
        "Ours (Sec. 3, App. A)",
        "this paper",
        "k",
        "2-layer, 2 heads in layer 1",
        _ours_width,
        lambda k: (LayerShape(2, "key_value", 2, 0, 2), LayerShape(1)),
    ),
    "rajaraman_3l1h": Architecture(
        "Rajaraman et al. '24 (Thm 4)",
        "Rajaraman et al. 2024",
        "k",
        "3-layer 1-head",
        _ours_width,
        lambda k: (
            LayerShape(1, "key_value", 2, 2, 1),
            LayerShape(1, "key_value", 2, 2, 1),
            LayerShape(1, "none", 2, 2, 1),
        ),
    ),
    "khead_2l": Architecture(
        "Nichani et al. '24 / Rajaraman Thm 2 (attention-only)",
        "Nichani et al. 2024",
        "k",
        "2-layer k-head, attention only",
        lambda s, k: (k + 2) * s + k + 1,  # Rajaraman et al., Thm 2
        lambda k: (LayerShape(k, "key"), LayerShape(1)),
    ),
}

UNCOUNTED = (
    ("Bietti et al. '23", "1", "2-layer 1-head (frozen random embeddings, no layer-1 MLP)"),
    ("Edelman et al. '24", "1", "2-layer 1-head, attention only"),
)
"""Rows of Table 1 listed as text only (paper D, Sec. 1)."""


def breakdown(
    name: str, states: int, order: int, length: int, separate_value_tables: bool = False
) -> dict[str, int]:
    """App. I component counts of architecture ``name`` at (S, k, T)."""
    arch = ARCHITECTURES[name]
    d = arch.width(states, order)
    counts = dict.fromkeys(COMPONENTS, 0)
    counts["token_embedding"] = states * d
    for layer in arch.layers(order):
        tables = {"none": 0, "key": 1, "key_value": 2 if separate_value_tables else 1}[layer.pe]
        counts["positional_encoding"] += layer.heads * tables * length * d
        counts["attention"] += 3 * layer.heads * d * d + (
            layer.heads * d * d if layer.heads > 1 else 0
        )
        counts["mlp_weights"] += layer.mlp_matrices * d * d
        counts["mlp_biases"] += layer.mlp_biases * d
        counts["layer_norms"] += 2 * d * layer.layer_norms
    counts["output"] = states * d + states
    return counts


def parameter_count(
    name: str, states: int, order: int, length: int, separate_value_tables: bool = False
) -> int:
    """Total parameters of architecture ``name`` (the Table 1 column)."""
    return sum(breakdown(name, states, order, length, separate_value_tables).values())


def crossover_order(
    states: int, length: int, max_order: int, separate_value_tables: bool = False
) -> int | None:
    """Smallest k from which ours (2L1H) has fewer parameters than the k-head model at every k
    up to ``max_order`` (Table 1, D-T1-2); None if there is none."""
    below = [
        parameter_count("ours_2l1h", states, k, length, separate_value_tables)
        < parameter_count("khead_2l", states, k, length, separate_value_tables)
        for k in range(1, max_order + 1)
    ]
    for k in range(1, max_order + 1):
        if all(below[k - 1 :]):
            return k
    return None
