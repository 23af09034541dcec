"""The structure of params.yaml and the typed view of it (`Params`).

What a person sets for running: the scale, the runtime, the shared run classification, the
cluster requests, and every experiment with its per-scale settings. `replicate.config` reads
and validates the file into a `Params`; the claims live in their own files
(`replicate.claim_files`). Nothing here imports an experiment: each experiment's settings
model is looked up by the loader, which hands `Params` the function that validates them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, Field, ValidationError, model_validator

from replicate.settings import NonNegativeInt, OpenUnit, PositiveInt, Strict

Scale = Literal["ci", "paper"]
SCALES: tuple[str, ...] = ("ci", "paper")
RESULTS = Path("results")


def results_dir(scale: str) -> Path:
    """One results tree per scale, ``results/<scale>/``: its experiments' folders
    (``<paper>/<item>/``) and its claims' verdicts (claims.json, REPORT.md, verdicts/), so
    that a run at one scale never touches the other's outputs."""
    return RESULTS / scale


def logs_dir(scale: str) -> Path:
    """``logs/<scale>/``: the jobs' logs of one scale (untracked)."""
    return Path("logs") / scale


def timings_dir(scale: str) -> Path:
    """Per-experiment timings of the last run at ``scale`` (untracked), read by
    `replicate.timings.expected_seconds`. `python -m replicate run` writes them rather than
    Snakemake's ``benchmark:``, which Snakemake counts as a rule output: outputs pulled from
    a DVC remote into a fresh clone would look incomplete without the timing file."""
    return logs_dir(scale) / "benchmarks"


class ConfigError(ValueError):
    """params.yaml, a claims file or a --config override is malformed; the message names the
    file, the key and the value."""


class KeyProblem(ValueError):
    """A model validator's finding about one key below the model: ``key``, its dotted path
    from the model. Pydantic locates a validator's error at the model itself; `format_errors`
    names (and finds the line of) this key instead."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(problem)
        self.key = key


# ----------------------------------------------------------------------------- scheduling
class ResourceRequest(Strict):
    """What one experiment's job asks of a scheduler (Snakemake resources of its rule).
    Unset fields come from ``cluster.resources`` of the same scale."""

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
    """Scheduling and restart settings, per scale.

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
                raise KeyProblem(name, f"missing scale(s) {missing}")
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
    ``runtime`` (they are its Snakemake params and DVC params; the runner fails when an
    experiment reads an undeclared section or declares one it never reads)."""

    @model_validator(mode="after")
    def _outputs_and_scales(self) -> ExperimentEntry:
        written = sorted(set(ALWAYS_WRITTEN) & set(self.outputs))
        if written:
            raise KeyProblem(
                f"outputs.{self.outputs.index(written[0])}",
                f"{written[0]} is always written; do not list it in outputs",
            )
        for i, curve in enumerate(self.curves):
            if curve.file not in self.outputs:
                raise KeyProblem(f"curves.{i}.file", f"{curve.file!r} is not among the outputs")
        missing = [s for s in SCALES if s not in self.settings]
        if missing:
            raise KeyProblem("settings", f"missing for scale(s) {missing}")
        return self

    def directory(self, scale: str) -> Path:
        """The experiment's folder in ``scale``'s results tree."""
        return results_dir(scale) / self.paper / self.item

    def output_paths(self, scale: str) -> list[Path]:
        return [self.directory(scale) / o for o in (*ALWAYS_WRITTEN, *self.outputs)]


PAPERS: tuple[str, ...] = get_args(ExperimentEntry.model_fields["paper"].annotation)
"""The paper keys, in the order of the papers (A, B, C, D)."""


class Classification(Strict):
    """The run classes' thresholds on kappa (`replicate.analysis.classify`)."""

    bigram_kappa_min: OpenUnit
    unigram_kappa_max: OpenUnit
    unigram_kappa_min: Annotated[float, Field(gt=-1.0, lt=0.0)]


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
    cluster: Cluster = Field(default_factory=Cluster)
    claims_dir: str = "claims"
    """The folder of the claims files (`replicate.claim_files`), relative to params.yaml's."""

    @model_validator(mode="after")
    def _upstream_edges(self) -> ParamsFile:
        for name, entry in self.experiments.items():
            if entry.upstream is not None:
                raise KeyProblem(
                    f"experiments.{name}.upstream",
                    "move an experiment that reads another's outputs to derived_experiments",
                )
        for name, entry in self.derived_experiments.items():
            source = f"{entry.paper}_{entry.upstream}"
            if entry.upstream is None or source not in self.all_experiments:
                raise KeyProblem(
                    f"derived_experiments.{name}.upstream",
                    f"must name an item of paper {entry.paper} under experiments or "
                    f"derived_experiments, not {entry.upstream!r}",
                )
            if name in self.experiments:
                raise KeyProblem(f"derived_experiments.{name}", "also defined under experiments")
        _upstream_first(self.derived_experiments)  # a derived upstream: no cycle
        return self

    @property
    def all_experiments(self) -> dict[str, ExperimentEntry]:
        """Every experiment; derived ones last, each after a derived upstream."""
        derived = self.derived_experiments
        return {**self.experiments, **{n: derived[n] for n in _upstream_first(derived)}}

    def section_of(self, name: str) -> str:
        """The section that defines experiment ``name`` (one of `all_experiments`)."""
        return "experiments" if name in self.experiments else "derived_experiments"


def _upstream_first(derived: Mapping[str, ExperimentEntry]) -> list[str]:
    """The names of ``derived``, each after its upstream when that is derived too (else in
    params.yaml order); a `KeyProblem` naming the loop when upstreams form a cycle."""
    order: list[str] = []

    def visit(name: str, path: list[str]) -> None:
        if name in order or name not in derived:
            return
        if name in path:
            loop = " -> ".join([*path[path.index(name) :], name])
            raise KeyProblem(f"derived_experiments.{path[0]}.upstream", f"cycle {loop}")
        entry = derived[name]
        visit(f"{entry.paper}_{entry.upstream}", [*path, name])
        order.append(name)

    for name in derived:
        visit(name, [])
    return order


# ----------------------------------------------------------------------------- the typed view
SettingsValidator = Callable[[ParamsFile, str], BaseModel]
"""Validates one experiment's settings at both scales and returns the active scale's
(`replicate.config` makes it from the experiment registry)."""


class Params:
    """Validated params.yaml at one scale, with typed per-experiment settings.

    ``settings``: the experiments validated when loading; any other is validated by
    ``validate`` on first use. ``file``: params.yaml's path; relative paths in it (the
    claims folder) start from its folder.
    """

    def __init__(
        self,
        raw: ParamsFile,
        settings: dict[str, BaseModel],
        validate: SettingsValidator,
        file: Path,
    ) -> None:
        self.raw = raw
        self._settings = settings
        self._validate = validate
        self.file = file

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
    def claims_dir(self) -> Path:
        """The folder of the claims files (``claims_dir``, relative to params.yaml's folder)."""
        return self.file.parent / self.raw.claims_dir

    @property
    def results_dir(self) -> Path:
        """The active scale's results tree (`results_dir`)."""
        return results_dir(self.scale)

    def directory(self, name: str) -> Path:
        """Experiment ``name``'s folder in the active scale's results tree."""
        return self.experiment(name).directory(self.scale)

    def output_paths(self, name: str) -> list[Path]:
        """Experiment ``name``'s outputs at the active scale, the always-written ones first."""
        return self.experiment(name).output_paths(self.scale)

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
            self._settings[name] = self._validate(self.raw, name)
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
        return self.raw.section_of(name)

    def input_keys(self, name: str, scale: str | None = None) -> list[str]:
        """The params.yaml keys that shape experiment ``name``'s outputs at ``scale``
        (default: the active one): the scale, ``runtime`` (threads, precision, chunking),
        its settings, and the shared sections it declares in ``reads``. Its Snakemake params
        hold their values; provenance.json records them; DVC reads them all but ``scale``
        (replicate/dvcfile.py)."""
        at = scale or self.raw.scale
        settings = f"{self.section_of(name)}.{name}.settings.{at}"
        return ["scale", "runtime", settings, *self.experiment(name).reads]


def value_at(data: Mapping[str, Any], key: str) -> Any:
    """The value of a dotted key path (``experiments.x.settings.ci``) in params data."""
    node: Any = data
    for part in key.split("."):
        node = node[part]
    return node


LineOf = Callable[[Sequence[str]], int | None]
"""The line in the file of a key path (its parts), or None where the file cannot tell."""


def _error_line(path: str, error: Mapping[str, Any]) -> str:
    """``path = value: problem``; without the value where it says nothing (a missing key,
    whose input is the mapping around it; an error about a whole mapping)."""
    if error["type"] == "missing":
        return f"{path}: missing (required)"
    value = error.get("input")
    shown = path if isinstance(value, dict) else f"{path} = {value!r}"
    return f"{shown}: {error['msg']}" if shown else str(error["msg"])


def within(path: str, keys: Collection[str]) -> bool:
    """Whether key path ``path`` is one of ``keys`` or lies below one."""
    return any(path == k or path.startswith(f"{k}.") for k in keys)


def format_errors(
    err: ValidationError,
    prefix: str,
    source: str,
    what: str = "parameters",
    overridden: Collection[str] = (),
    line_of: LineOf | None = None,
) -> str:
    """One line per validation error: the key path under ``prefix``, the value, the problem.

    ``overridden``: the dotted key paths given on the command line (``--config``); an error
    at or under one of them is that option's, not ``source``'s. ``line_of``: where a key path
    lies in ``source``; each of its errors then starts with that line (a missing key: the
    line of the mapping that lacks it).
    """
    errors = []
    for e in err.errors():
        keys = [*(prefix.split(".") if prefix else []), *map(str, e["loc"])]
        error: Mapping[str, Any] = e
        cause = e.get("ctx", {}).get("error")
        if isinstance(cause, KeyProblem):  # a validator's error about one key of its model
            keys += cause.key.split(".")
            error = {**e, "msg": str(cause)}
        path = ".".join(keys)
        origin = "--config" if within(path, overridden) else source
        line = line_of(keys) if line_of is not None and origin == source else None
        text = _error_line(path, error)
        errors.append((origin, text if line is None else f"line {line}: {text}"))
    sources = list(dict.fromkeys(origin for origin, _ in errors))
    mixed = len(sources) > 1
    lines = [f"  {line} ({origin})" if mixed else f"  {line}" for origin, line in errors]
    return "\n".join([f"{' and '.join(sources)}: invalid {what}", *lines])
