"""Closed forms and constructions of paper D ("What one cannot, two can", Ekbote et al. 2025).

A "spec D §n" below names our replication plan's section for a result; the paper's own section
or equation is given beside it (docs/papers.md). One module per job:

* `gd` — the reduced two-layer model of Sec. 5 / App. C and its two-stage gradient descent
  (spec D §4);
* `counts` — parameter counts of the explicit constructions and of prior ones (Table 1,
  App. I; spec D §5.1, §5.11);
* `constructions` — explicit weights of the 2L2H, 2L1H, 3L1H and ungated constructions
  (Sec. 3, Sec. 4, App. A-B, Rajaraman et al. Thm 4; spec D §3) as `EnsembleGPT` weights.
"""
