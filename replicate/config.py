"""Load and validate params.yaml into typed settings; errors name the key path and value.

`load_params` returns a `Params` object; `Params.settings(name)` gives one experiment's
validated, typed settings at the active scale. The settings model of each experiment is
declared by the experiment registry (`replicate.experiments.REGISTRY`).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
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


Verdict = Literal["holds", "does-not-reproduce", "inconclusive"]
"""``inconclusive``: the seed-bootstrap interval of the measured value straddles the
tolerance (`replicate.claims`); never counted as holds or as does-not-reproduce."""

Provenance = Literal["paper", "derived", "proposal", "settings"]
"""Whose statement a claim checks: the paper's own result; our derivation from it; our
proposal (a check the paper does not make); or a consistency check of our settings or
instantiated model against the paper's tables (``settings``)."""


class Expectation(Strict):
    verdict: Verdict
    basis: str
    reason: str | None = None
    measured: float | None = None
    """The measured value the expectation was set from (None: recorded in ``basis`` only)."""
    commit: str | None = None
    """Short commit hash (plus " + working tree" if uncommitted) at which it was measured."""

    @model_validator(mode="after")
    def _failure_needs_reason(self) -> Expectation:
        if self.verdict != "holds" and not self.reason:
            raise ValueError(f"an expected verdict {self.verdict!r} needs a reason")
        return self


class MetricRef(Strict):
    metric: str


class SeedAggregate(Strict):
    """Where a multi-seed claim's per-seed values are, and how they make the measured value.

    ``pattern`` is a metrics.json key with ``{seed}`` where the seed number goes (keys read
    ``.../seed<s>/...``) and ``*`` for one path segment that varies across groups (cells,
    chains, tyings). Per group, the per-seed values are reduced with ``over_seeds``; the
    group values with ``over_groups``. ``indicator``: a per-seed value counts as 1 when it
    equals this number (e.g. a run class), else 0, so ``mean`` gives a fraction of seeds.
    The claim's metric must equal this aggregate over all seeds (checked at evaluation).
    """

    pattern: str
    over_seeds: Literal["mean", "abs_mean", "median", "max", "min", "sum"]
    over_groups: Literal["max", "min", "mean", "sum"] | None = None
    indicator: float | None = None

    @model_validator(mode="after")
    def _placeholders(self) -> SeedAggregate:
        if self.pattern.count("{seed}") != 1:
            raise ValueError("per_seed.pattern needs exactly one '{seed}'")
        if ("*" in self.pattern) != (self.over_groups is not None):
            raise ValueError("per_seed.over_groups is needed exactly when the pattern has '*'")
        return self


class Claim(Strict):
    id: str
    experiment: str
    figure: str
    statement: str
    source: str
    provenance: Provenance
    metric: str
    comparison: Literal["le", "ge", "close"]
    reference: float | MetricRef
    reference_source: str
    tolerance: ClaimTolerance
    expected: dict[Scale, Expectation]
    per_seed: SeedAggregate | None = None
    """Per-seed values of a multi-seed claim: per-seed verdicts and a seed-bootstrap interval."""
    note: str | None = None
    """What a reader must know to trust the verdict (a mislabel in the paper, a variant)."""

    @model_validator(mode="after")
    def _both_scales(self) -> Claim:
        missing = [s for s in SCALES if s not in self.expected]
        if missing:
            raise ValueError(f"expected verdict missing for scale(s) {missing}")
        return self


# ----------------------------------------------------------------------------- scheduling
NonNegativeInt = Annotated[int, Field(ge=0)]


class ResourceRequest(Strict):
    """What one experiment's job asks of a scheduler (Snakemake resources of its rule, issue
    12). Unset fields come from ``cluster.resources`` of the same scale."""

    mem_mb: PositiveInt | None = None
    runtime: PositiveInt | None = None
    """Wall-clock minutes (SLURM ``--time``)."""
    gpu: NonNegativeInt | None = None


class Resources(Strict):
    """A complete request: every field set."""

    mem_mb: PositiveInt
    runtime: PositiveInt
    gpu: NonNegativeInt

    def merged(self, override: ResourceRequest | None) -> Resources:
        if override is None:
            return self
        return self.model_copy(update=override.model_dump(exclude_none=True))


def _default_resources() -> dict[Scale, Resources]:
    return {
        "ci": Resources(mem_mb=4000, runtime=60, gpu=0),
        "paper": Resources(mem_mb=16000, runtime=1440, gpu=1),
    }


class Cluster(Strict):
    """Scheduling and restart settings (issue 12), per scale.

    ``resources``: the request of every experiment's job unless its entry overrides it;
    ``checkpoint_every``: steps between Lightning checkpoints of each training (0: none).
    """

    resources: dict[Scale, Resources] = Field(default_factory=_default_resources)
    checkpoint_every: dict[Scale, NonNegativeInt] = Field(
        default_factory=lambda: {"ci": 0, "paper": 500}
    )

    @model_validator(mode="after")
    def _both_scales(self) -> Cluster:
        for name in ("resources", "checkpoint_every"):
            missing = [s for s in SCALES if s not in getattr(self, name)]
            if missing:
                raise ValueError(f"{name}: missing scale(s) {missing}")
        return self


# ----------------------------------------------------------------------------- experiments
METRICS_FILE = "metrics.json"
PROVENANCE_FILE = "provenance.json"
ALWAYS_WRITTEN = (METRICS_FILE, PROVENANCE_FILE)
"""Written by every experiment into its folder besides the outputs params.yaml lists."""


class CurvePlot(Strict):
    """Columns of an output CSV drawn by `dvc plots show`, one line per run (dvc.yaml's
    ``plots``, template ``.dvc/plots/runs.json``)."""

    file: str
    y: list[str]
    y_label: str
    x: str = "step"
    x_label: str = "training step"


class ExperimentEntry(Strict):
    paper: Literal["attn_markov", "local_global", "subngrams", "two_layer"]
    item: str
    title: str
    source: str
    outputs: list[str]
    settings: dict[Scale, dict[str, Any]]
    upstream: str | None = None  # item of the same paper whose outputs this one reads
    resources: dict[Scale, ResourceRequest] = Field(default_factory=dict)
    """Per-scale overrides of ``cluster.resources`` (e.g. no GPU for a closed-form table)."""
    curves: list[CurvePlot] = Field(default_factory=list)
    reads: list[Literal["classification"]] = Field(default_factory=list)
    """Top-level sections of params.yaml that the experiment reads besides its settings and
    ``runtime`` (issue 11: they are its Snakemake params and DVC params; the runner fails
    when an experiment reads an undeclared section or declares one it never reads)."""

    @model_validator(mode="after")
    def _outputs_and_scales(self) -> ExperimentEntry:
        written = sorted(set(ALWAYS_WRITTEN) & set(self.outputs))
        if written:
            raise ValueError(f"{written[0]} is always written; do not list it in outputs")
        for curve in self.curves:
            if curve.file not in self.outputs:
                raise ValueError(f"curves: {curve.file!r} is not among the outputs")
        missing = [s for s in SCALES if s not in self.settings]
        if missing:
            raise ValueError(f"settings missing for scale(s) {missing}")
        return self

    @property
    def directory(self) -> Path:
        return Path("results") / self.paper / self.item

    @property
    def output_paths(self) -> list[Path]:
        return [self.directory / o for o in (*ALWAYS_WRITTEN, *self.outputs)]


class Classification(Strict):
    bigram_kappa_min: OpenUnit
    unigram_kappa_max: OpenUnit


Precision = Literal["32-true", "bf16-mixed", "16-mixed"]
"""Lightning's Trainer precision: float32, or autocast to bfloat16 / float16 in the training
step (evaluations run outside it, in float32)."""


class Runtime(Strict):
    """How every process uses its device (same seed + device + these => same metrics)."""

    threads: PositiveInt
    precision: Precision = "32-true"
    max_members_per_chunk: PositiveInt | None = None


class ParamsFile(Strict):
    scale: Scale
    runtime: Runtime
    classification: Classification
    experiments: dict[str, ExperimentEntry]
    derived_experiments: dict[str, ExperimentEntry] = Field(default_factory=dict)
    claims: list[Claim]
    cluster: Cluster = Field(default_factory=Cluster)

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
            if entry.upstream is None or source not in self.all_experiments:
                raise ValueError(
                    f"derived_experiments.{name}.upstream = {entry.upstream!r}: must name an "
                    f"item of paper {entry.paper} under experiments or derived_experiments"
                )
            if name in self.experiments:
                raise ValueError(f"derived_experiments.{name}: also defined under experiments")
        _upstream_first(self.derived_experiments)  # a derived upstream: no cycle
        return self

    @property
    def all_experiments(self) -> dict[str, ExperimentEntry]:
        """Every experiment; derived ones last, each after a derived upstream."""
        derived = self.derived_experiments
        return {**self.experiments, **{n: derived[n] for n in _upstream_first(derived)}}


def _upstream_first(derived: Mapping[str, ExperimentEntry]) -> list[str]:
    """The names of ``derived``, each after its upstream when that is derived too (else in
    params.yaml order); ValueError naming the loop when upstreams form a cycle."""
    order: list[str] = []

    def visit(name: str, path: list[str]) -> None:
        if name in order or name not in derived:
            return
        if name in path:
            loop = " -> ".join([*path[path.index(name) :], name])
            raise ValueError(f"derived_experiments.{path[0]}.upstream: cycle {loop}")
        entry = derived[name]
        visit(f"{entry.paper}_{entry.upstream}", [*path, name])
        order.append(name)

    for name in derived:
        visit(name, [])
    return order


# ----------------------------------------------------------------------------- loading
class Params:
    """Validated params.yaml at one scale, with typed per-experiment settings."""

    def __init__(self, raw: ParamsFile, settings: dict[str, BaseModel], source: str) -> None:
        self.raw = raw
        self._settings = settings
        self._source = source

    @property
    def scale(self) -> str:
        return self.raw.scale

    @property
    def experiments(self) -> dict[str, ExperimentEntry]:
        """Every experiment, derived ones (reading another's outputs) last, upstreams first."""
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
        """The typed settings of experiment ``name`` at the active scale (validated on first
        use when `load_params` was told to check ``only`` some experiments)."""
        self.experiment(name)
        if name not in self._settings:
            _check_implemented([name], self._source)
            self._settings[name] = _validated_settings(self.raw, name, self._source)
        return self._settings[name]

    def resources(self, name: str, planned: ResourceRequest | None = None) -> Resources:
        """What experiment ``name``'s job asks of a scheduler at the active scale: its own
        ``resources`` block, else ``planned`` (the cost plan, `replicate.plan`), else
        ``cluster.resources``."""
        scale = self.raw.scale
        default = self.raw.cluster.resources[scale].merged(planned)
        return default.merged(self.experiment(name).resources.get(scale))

    @property
    def checkpoint_every(self) -> int:
        """Steps between training checkpoints at the active scale (0: none)."""
        return self.raw.cluster.checkpoint_every[self.raw.scale]

    def section_of(self, name: str) -> str:
        """The params.yaml section that defines experiment ``name``."""
        self.experiment(name)
        return "experiments" if name in self.raw.experiments else "derived_experiments"

    def input_keys(self, name: str, scale: str | None = None) -> list[str]:
        """The params.yaml keys that shape experiment ``name``'s outputs at ``scale`` (default:
        the active one), issue 11: the scale, ``runtime`` (threads, precision, chunking), its
        settings, and the shared sections it declares in ``reads``. They are its DVC params;
        its Snakemake params hold their values; provenance.json records them."""
        at = scale or self.raw.scale
        settings = f"{self.section_of(name)}.{name}.settings.{at}"
        return ["scale", "runtime", settings, *self.experiment(name).reads]


def value_at(data: Mapping[str, Any], key: str) -> Any:
    """The value of a dotted key path (``experiments.x.settings.ci``) in params data."""
    node: Any = data
    for part in key.split("."):
        node = node[part]
    return node


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
        # libyaml's parser when present: the same mapping as yaml.safe_load, 8x faster on
        # params.yaml (issue 13: every job and every Snakemake call reads the whole file).
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping at top level, got {type(data).__name__}")
    return data


def _check_implemented(names: Iterable[str], source: str) -> None:
    from replicate.experiments import REGISTRY  # the registry imports config, not vice versa

    unknown = sorted(n for n in names if n not in REGISTRY)
    if unknown:
        raise ConfigError(
            f"{source}: experiments.{unknown[0]}: no experiment of that name is implemented "
            f"(implemented: {', '.join(sorted(REGISTRY))})"
        )


def _validated_settings(raw: ParamsFile, exp_name: str, source: str) -> BaseModel:
    """Validate experiment ``exp_name``'s settings at both scales; return the active one."""
    from replicate.experiments import REGISTRY

    entry = raw.all_experiments[exp_name]
    model = REGISTRY[exp_name].settings_model
    active: BaseModel | None = None
    for s in SCALES:
        try:
            validated = model.model_validate(entry.settings[s])
        except ValidationError as err:
            prefix = f"experiments.{exp_name}.settings.{s}"
            raise ConfigError(_format_errors(err, prefix, source)) from err
        if s == raw.scale:
            active = validated
    assert active is not None
    return active


def load_params(
    source: Mapping[str, Any] | Path | str = DEFAULT_PARAMS,
    scale: str | None = None,
    only: Collection[str] | None = None,
) -> Params:
    """Validate params (a path, or the dict Snakemake built from it) at ``scale``.

    ``scale`` overrides the file's own ``scale`` key (as ``--config scale=paper`` does).
    ``only``: validate the settings of just these experiments now (a job running one of
    them imports only its paper's code, issue 13); the others are validated by
    `Params.settings` on first use. None: every experiment, now.
    """
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

    checked = list(raw.all_experiments) if only is None else list(only)
    _check_implemented([n for n in checked if n in raw.all_experiments], name)
    for exp_name, entry in raw.all_experiments.items():
        expected_name = f"{entry.paper}_{entry.item}"
        if exp_name != expected_name:
            raise ConfigError(
                f"{name}: experiments.{exp_name}: name must be <paper>_<item> = {expected_name!r}"
            )
    settings = {
        exp_name: _validated_settings(raw, exp_name, name)
        for exp_name in checked
        if exp_name in raw.all_experiments
    }

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
    return Params(raw, settings, name)
