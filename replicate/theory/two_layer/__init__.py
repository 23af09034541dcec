"""Closed forms and constructions of paper D ("What one cannot, two can", Ekbote et al. 2025).

Locations below are the paper's own sections, appendices and tables (docs/papers.md). One
module per job:

* `gd` — the reduced two-layer model of Sec. 5 / App. C and its two-stage gradient descent
  (App. C.1-C.3);
* `counts` — parameter counts of the explicit constructions and of prior ones (Table 1,
  App. I);
* `constructions` — explicit weights of the 2L2H, 2L1H, 3L1H and ungated constructions
  (Sec. 3, Sec. 4, App. A-B, Rajaraman et al. Thm 4) as `EnsembleGPT` weights.
"""
