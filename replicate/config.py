"""Load and validate params.yaml into typed settings; errors name the key path and value.

`load_params` returns a `Params` object; `Params.settings(name)` gives one experiment's
validated, typed settings at the active scale. The settings model of each experiment is
declared by the experiment registry (`replicate.experiments.REGISTRY`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

Scale = Literal["ci", "paper"]
SCALES: tuple[str, ...] = ("ci", "paper")
DEFAULT_PARAMS = Path("params.yaml")


class ConfigError(ValueError):
    """params.yaml (or a --config override) is malformed; the message names key and value."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


PositiveInt = Annotated[int, Field(gt=0)]
OpenUnit = Annotated[float, Field(gt=0.0, lt=1.0)]


# ----------------------------------------------------------------------------- settings blocks
class ModelSettings(Strict):
    """Transformer shape and variant (spec A, Sec. 1.2-1.4)."""

    variant: Literal["theory", "gpt2"]
    activation: Literal["relu", "gelu"]
    n_embd: PositiveInt
    n_layer: PositiveInt
    n_head: PositiveInt
    mlp_ratio: PositiveInt
    init_std: Annotated[float, Field(gt=0.0)]


class TrainingSettings(Strict):
    steps: PositiveInt
    batch_size: PositiveInt
    seq_len: PositiveInt
    eval_every: PositiveInt
    test_sequences: PositiveInt
    test_seed: Annotated[int, Field(ge=0)]


class OptimSettings(Strict):
    lr: Annotated[float, Field(gt=0.0)]
    beta1: Annotated[float, Field(ge=0.0, lt=1.0)]
    beta2: Annotated[float, Field(ge=0.0, lt=1.0)]
    weight_decay: Annotated[float, Field(ge=0.0)]
    schedule: Literal["onecycle_cosine", "constant"]
    pct_start: OpenUnit
    div_factor: Annotated[float, Field(gt=0.0)]
    final_div_factor: Annotated[float, Field(gt=0.0)]


class BinaryChainSettings(Strict):
    """P(p, q): p flips 0 -> 1, q flips 1 -> 0 (paper A, Sec. 2.2)."""

    p: OpenUnit
    q: OpenUnit

    @property
    def tag(self) -> str:
        return f"p{self.p:g}_q{self.q:g}"


# ----------------------------------------------------------------------------- claims
class ClaimTolerance(Strict):
    paper: Annotated[float, Field(ge=0.0)]
    ci: Annotated[float, Field(ge=0.0)]
    ci_reason: str | None = None

    @model_validator(mode="after")
    def _looser_ci_needs_reason(self) -> ClaimTolerance:
        if self.ci > self.paper and not self.ci_reason:
            raise ValueError(
                f"ci tolerance {self.ci} is looser than paper tolerance {self.paper}: "
                "add ci_reason saying why the reduced scale needs it"
            )
        return self


class Expectation(Strict):
    verdict: Literal["holds", "does-not-reproduce"]
    basis: str
    reason: str | None = None

    @model_validator(mode="after")
    def _failure_needs_reason(self) -> Expectation:
        if self.verdict == "does-not-reproduce" and not self.reason:
            raise ValueError("an expected verdict 'does-not-reproduce' needs a reason")
        return self


class MetricRef(Strict):
    metric: str


class Claim(Strict):
    id: str
    experiment: str
    figure: str
    statement: str
    source: str
    provenance: Literal["paper", "derived", "proposal"]
    metric: str
    comparison: Literal["le", "ge", "close"]
    reference: float | MetricRef
    reference_source: str
    tolerance: ClaimTolerance
    expected: dict[Scale, Expectation]

    @model_validator(mode="after")
    def _both_scales(self) -> Claim:
        missing = [s for s in SCALES if s not in self.expected]
        if missing:
            raise ValueError(f"expected verdict missing for scale(s) {missing}")
        return self


# ----------------------------------------------------------------------------- experiments
class ExperimentEntry(Strict):
    paper: Literal["attn_markov", "local_global", "subngrams", "two_layer"]
    item: str
    title: str
    source: str
    outputs: list[str]
    settings: dict[Scale, dict[str, Any]]
    upstream: str | None = None  # item of the same paper whose outputs this one reads

    @model_validator(mode="after")
    def _outputs_and_scales(self) -> ExperimentEntry:
        if "metrics.json" in self.outputs:
            raise ValueError("metrics.json is always written; do not list it in outputs")
        missing = [s for s in SCALES if s not in self.settings]
        if missing:
            raise ValueError(f"settings missing for scale(s) {missing}")
        return self

    @property
    def directory(self) -> Path:
        return Path("results") / self.paper / self.item

    @property
    def output_paths(self) -> list[Path]:
        return [self.directory / "metrics.json", *(self.directory / o for o in self.outputs)]


class Classification(Strict):
    bigram_kappa_min: OpenUnit
    unigram_kappa_max: OpenUnit


class Runtime(Strict):
    threads: PositiveInt


class ParamsFile(Strict):
    scale: Scale
    runtime: Runtime
    classification: Classification
    experiments: dict[str, ExperimentEntry]
    derived_experiments: dict[str, ExperimentEntry] = Field(default_factory=dict)
    claims: list[Claim]

    @model_validator(mode="after")
    def _upstream_edges(self) -> ParamsFile:
        for name, entry in self.experiments.items():
            if entry.upstream is not None:
                raise ValueError(
                    f"experiments.{name}.upstream: move an experiment that reads another's "
                    "outputs to derived_experiments"
                )
        for name, entry in self.derived_experiments.items():
            source = f"{entry.paper}_{entry.upstream}"
            if entry.upstream is None or source not in self.experiments:
                raise ValueError(
                    f"derived_experiments.{name}.upstream = {entry.upstream!r}: must name an "
                    f"item of paper {entry.paper} under experiments"
                )
            if name in self.experiments:
                raise ValueError(f"derived_experiments.{name}: also defined under experiments")
        return self

    @property
    def all_experiments(self) -> dict[str, ExperimentEntry]:
        return {**self.experiments, **self.derived_experiments}


# ----------------------------------------------------------------------------- loading
class Params:
    """Validated params.yaml at one scale, with typed per-experiment settings."""

    def __init__(self, raw: ParamsFile, settings: dict[str, BaseModel]) -> None:
        self.raw = raw
        self._settings = settings

    @property
    def scale(self) -> str:
        return self.raw.scale

    @property
    def experiments(self) -> dict[str, ExperimentEntry]:
        """Every experiment, derived ones (reading another's outputs) last."""
        return self.raw.all_experiments

    def upstream_of(self, name: str) -> str | None:
        entry = self.experiment(name)
        return None if entry.upstream is None else f"{entry.paper}_{entry.upstream}"

    @property
    def claims(self) -> list[Claim]:
        return self.raw.claims

    def experiment(self, name: str) -> ExperimentEntry:
        if name not in self.experiments:
            known = ", ".join(sorted(self.experiments))
            raise ConfigError(f"unknown experiment {name!r}; known experiments: {known}")
        return self.experiments[name]

    def settings(self, name: str) -> BaseModel:
        """The typed settings of experiment ``name`` at the active scale."""
        self.experiment(name)
        return self._settings[name]

    def settings_json(self, name: str) -> str:
        """Canonical JSON of one experiment's active settings (Snakemake re-run trigger)."""
        return json.dumps(self.settings(name).model_dump(mode="json"), sort_keys=True)


def _format_loc(prefix: str, loc: tuple[Any, ...]) -> str:
    parts = [prefix] if prefix else []
    parts += [str(p) for p in loc]
    return ".".join(parts)


def _format_errors(err: ValidationError, prefix: str, source: str) -> str:
    lines = [f"{source}: invalid parameters"]
    for e in err.errors():
        value = e.get("input")
        shown = repr(value) if not isinstance(value, dict) else "{...}"
        lines.append(f"  {_format_loc(prefix, e['loc'])} = {shown}: {e['msg']}")
    return "\n".join(lines)


def _reject_nan(node: Any, path: str, source: str) -> None:
    if isinstance(node, float) and math.isnan(node):
        raise ConfigError(f"{source}: {path} = nan is not a valid value")
    if isinstance(node, Mapping):
        for k, v in node.items():
            _reject_nan(v, f"{path}.{k}" if path else str(k), source)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _reject_nan(v, f"{path}.{i}", source)


def read_params_file(path: Path = DEFAULT_PARAMS) -> dict[str, Any]:
    """Parse params.yaml into a dict; a YAML syntax error becomes a ConfigError."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read parameters file {path}: {exc.strerror}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping at top level, got {type(data).__name__}")
    return data


def load_params(
    source: Mapping[str, Any] | Path | str = DEFAULT_PARAMS, scale: str | None = None
) -> Params:
    """Validate params (a path, or the dict Snakemake built from it) at ``scale``.

    ``scale`` overrides the file's own ``scale`` key (as ``--config scale=paper`` does).
    """
    from replicate.experiments import REGISTRY  # the registry imports config, not vice versa

    if isinstance(source, (str, Path)):
        name = str(source)
        data = read_params_file(Path(source))
    else:
        name = "params.yaml"
        data = dict(source)
    if scale is not None:
        data["scale"] = scale
    _reject_nan(data, "", name)
    try:
        raw = ParamsFile.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_errors(err, "", name)) from err

    unknown = sorted(set(raw.all_experiments) - set(REGISTRY))
    if unknown:
        raise ConfigError(
            f"{name}: experiments.{unknown[0]}: no experiment of that name is implemented "
            f"(implemented: {', '.join(sorted(REGISTRY))})"
        )
    settings: dict[str, BaseModel] = {}
    for exp_name, entry in raw.all_experiments.items():
        expected_name = f"{entry.paper}_{entry.item}"
        if exp_name != expected_name:
            raise ConfigError(
                f"{name}: experiments.{exp_name}: name must be <paper>_<item> = {expected_name!r}"
            )
        model = REGISTRY[exp_name].settings_model
        for s in SCALES:
            try:
                validated = model.model_validate(entry.settings[s])
            except ValidationError as err:
                prefix = f"experiments.{exp_name}.settings.{s}"
                raise ConfigError(_format_errors(err, prefix, name)) from err
            if s == raw.scale:
                settings[exp_name] = validated

    for i, claim in enumerate(raw.claims):
        if claim.experiment not in raw.all_experiments:
            raise ConfigError(
                f"{name}: claims.{i} (id {claim.id!r}): experiment = {claim.experiment!r} "
                "is not defined under experiments"
            )
    ids = [c.id for c in raw.claims]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ConfigError(f"{name}: claims: duplicate claim id(s) {dupes}")
    return Params(raw, settings)
