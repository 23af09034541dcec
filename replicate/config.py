"""Load and validate params.yaml into a `Params`; errors name the key path and value.

The structure of the file is `replicate.params`; each experiment's settings model comes from
the experiment registry (`replicate.experiments.REGISTRY`), which imports an experiment's
paper only when one of its experiments is looked up. The claims are loaded apart, from the
files `replicate.claim_files` reads.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pydantic
import yaml
from pydantic import BaseModel, ValidationError

from replicate.experiments import REGISTRY
from replicate.params import (
    SCALES,
    ConfigError,
    Params,
    ParamsFile,
    SettingsValidator,
    format_errors,
    within,
)
from replicate.user_cache import cache_dir, read_entry, write_entry

DEFAULT_PARAMS = Path("params.yaml")
CODE_ROOTS = (
    Path(__file__).resolve().parent,
    Path(__file__).resolve().parents[1] / "lightning_modules",
)
"""The packages whose code defines and checks the settings (the experiments' schemas)."""
VALIDATED = "validated"
"""The user cache's entries that mark a params content as validated in full."""


def validated_dir() -> Path:
    """Where `load_params` leaves a mark for each params content it validated in full (the
    user's cache, `replicate.user_cache`)."""
    return cache_dir(VALIDATED)


def validation_key(data: Mapping[str, Any]) -> str:
    """What a full validation of ``data`` depends on, hashed: the values (the scale and any
    ``--config`` override included), every module of `CODE_ROOTS`, and pydantic's and
    Python's versions. The same key validates the same way, so it is validated once."""
    digest = hashlib.sha256(json.dumps(data, sort_keys=True, default=repr).encode())
    for root in CODE_ROOTS:
        for path in sorted(root.rglob("*.py")):
            digest.update(path.relative_to(root.parent).as_posix().encode() + b"\0")
            digest.update(path.read_bytes())
    digest.update(f"{pydantic.VERSION} {sys.version}".encode())
    return digest.hexdigest()


def _key_lines(
    node: yaml.Node, path: tuple[str, ...], lines: dict[tuple[str, ...], int], seen: set[int]
) -> None:
    """Enter in ``lines`` the line (from 1) of each key and list item below ``node``, by its
    key path. A node met again through an alias is not walked again (an anchor may hold
    itself): a key below an alias is found at the alias's key."""
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        children = [(str(key.value), key, value) for key, value in node.value]
    elif isinstance(node, yaml.SequenceNode):
        children = [(str(i), item, item) for i, item in enumerate(node.value)]
    else:
        return
    for key, marked, value in children:
        child = (*path, key)
        lines.setdefault(child, marked.start_mark.line + 1)
        _key_lines(value, child, lines, seen)


class KeyLines:
    """The line of each key of a params file, found when an error needs one: the file is
    parsed again, as YAML nodes, which a valid load (every job, every Snakemake call) never
    pays for."""

    def __init__(self, file: Path) -> None:
        self.file = file.absolute()
        self._lines: dict[tuple[str, ...], int] | None = None

    def _read(self) -> dict[tuple[str, ...], int]:
        if self._lines is None:
            self._lines = {}
            try:
                root = yaml.compose(self.file.read_text(), Loader=_UniqueKeyLoader)
            except (OSError, yaml.YAMLError):
                return self._lines  # no file to point into: errors go without a line
            if root is not None:
                self._lines[()] = root.start_mark.line + 1
                _key_lines(root, (), self._lines, set())
        return self._lines

    def __call__(self, keys: Sequence[str]) -> int | None:
        """The line of key path ``keys``, or of the deepest key of the file on it: a missing
        key's mapping (for a missing top-level key, the line where the document starts). The
        parts of a pydantic location that are no key of the file (``[key]`` after a bad key,
        a union member's name) are passed over."""
        lines = self._read()
        found: tuple[str, ...] = ()
        for key in keys:
            if (*found, key) in lines:
                found = (*found, key)
        return lines.get(found)


class _Origin:
    """Where the values being validated came from: the file ``name`` (``lines``: where its
    keys are) and, for the key paths ``overridden``, Snakemake's --config option."""

    def __init__(self, name: str, lines: KeyLines, overridden: Collection[str]) -> None:
        self.name = name
        self.lines = lines
        self.overridden = overridden

    def at(self, keys: Sequence[str]) -> str:
        """A one-line error's start for key path ``keys``: ``params.yaml: line 12: a.b``, or
        ``--config: a.b`` for a value the option set."""
        path = ".".join(keys)
        if within(path, self.overridden):
            return f"--config: {path}"
        line = self.lines(keys)
        return f"{self.name}: {path}" if line is None else f"{self.name}: line {line}: {path}"

    def errors(self, err: ValidationError, prefix: str = "") -> ConfigError:
        """``err``'s errors, each with its line (`format_errors`)."""
        return ConfigError(
            format_errors(err, prefix, self.name, overridden=self.overridden, line_of=self.lines)
        )


def _reject_nan(node: Any, keys: tuple[str, ...], origin: _Origin) -> None:
    if isinstance(node, float) and math.isnan(node):
        raise ConfigError(f"{origin.at(keys)} = nan is not a valid value")
    if isinstance(node, Mapping):
        for k, v in node.items():
            _reject_nan(v, (*keys, str(k)), origin)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _reject_nan(v, (*keys, str(i)), origin)


class _UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """libyaml's parser when present (the same mapping as yaml.safe_load, 8x faster: every
    job and every Snakemake call reads params.yaml), refusing a key given twice in one
    mapping, which YAML would otherwise resolve silently to its last value."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)):
                continue
            if key in first:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first given at line {first[key] + 1})",
                    key_node.start_mark,
                )
            first[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """Where and what: ``line L, column C: problem (context, line L)``, one line."""
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem_mark is None:
        return " ".join(str(exc).split())
    mark = exc.problem_mark
    text = f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem}"
    if exc.context:
        where = f", line {exc.context_mark.line + 1}" if exc.context_mark is not None else ""
        text += f" ({exc.context}{where})"
    return text


def read_yaml_file(path: Path, what: str = "parameters file") -> Any:
    """Parse a YAML file (``what`` it is, for errors); an unreadable file or a YAML syntax
    error becomes a one-line ConfigError naming the file, line and column."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror}") from exc
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {_yaml_problem(exc)}") from exc


def read_params_file(path: Path = DEFAULT_PARAMS) -> dict[str, Any]:
    """Parse params.yaml into a dict; a YAML syntax error becomes a ConfigError."""
    data = read_yaml_file(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping at top level, got {type(data).__name__}")
    return data


def _check_implemented(raw: ParamsFile, names: Iterable[str], origin: _Origin) -> None:
    unknown = sorted(n for n in names if n not in REGISTRY)
    if unknown:
        raise ConfigError(
            f"{origin.at([raw.section_of(unknown[0]), unknown[0]])}: no experiment of that "
            f"name is implemented (implemented: {', '.join(sorted(REGISTRY))})"
        )


def _settings_validator(origin: _Origin) -> SettingsValidator:
    """The validator `Params` uses for experiments it was not told to validate at load."""

    def validated(raw: ParamsFile, exp_name: str) -> BaseModel:
        """Validate experiment ``exp_name``'s settings at both scales; return the active one."""
        _check_implemented(raw, [exp_name], origin)
        entry = raw.all_experiments[exp_name]
        model = REGISTRY[exp_name].settings_model
        active: BaseModel | None = None
        for s in SCALES:
            try:
                validated_settings = model.model_validate(entry.settings[s])
            except ValidationError as err:
                prefix = f"{raw.section_of(exp_name)}.{exp_name}.settings.{s}"
                raise origin.errors(err, prefix) from err
            if s == raw.scale:
                active = validated_settings
        assert active is not None
        return active

    return validated


def _key_paths(overrides: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The dotted key paths of the leaves of ``overrides`` (``{"a": {"b": 1}}``: ``a.b``)."""
    paths: list[str] = []
    for key, value in overrides.items():
        path = f"{prefix}{key}"
        paths += _key_paths(value, f"{path}.") if isinstance(value, Mapping) and value else [path]
    return paths


def load_params(
    source: Mapping[str, Any] | Path | str = DEFAULT_PARAMS,
    scale: str | None = None,
    only: Collection[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Params:
    """Validate params (a path, or the dict Snakemake built from it) at ``scale``.

    ``scale`` overrides the file's own ``scale`` key (as ``--config scale=paper`` does).
    ``overrides``: the values Snakemake's ``--config`` put into the dict; an invalid one is
    reported as the option's, not the file's.
    ``only``: validate the settings of just these experiments now (a job running one of them
    imports only its paper's code); the others are validated by `Params.settings` on first
    use. None: every experiment, now, unless the same content (`validation_key`) validated
    in full before (then each on first use, as for ``only``).
    Relative paths in the file (``claims_dir``) start from the file's folder; for a dict,
    from the working directory. An error names the line of its key in the file (for a dict,
    in the working directory's params.yaml, which Snakemake read it from), unless --config
    set the value.
    """
    file = Path(source) if isinstance(source, (str, Path)) else DEFAULT_PARAMS
    data = read_params_file(file) if isinstance(source, (str, Path)) else dict(source)
    if scale is not None:
        data["scale"] = scale
    origin = _Origin(str(file), KeyLines(file), _key_paths(overrides or {}))
    _reject_nan(data, (), origin)
    try:
        raw = ParamsFile.model_validate(data)
    except ValidationError as err:
        raise origin.errors(err) from err

    # Validating every experiment imports every paper's code (about 5 s, on every Snakemake
    # start); content validated in full before is validated lazily, on first use, instead.
    key = validation_key(data) if only is None else None
    if key is not None and read_entry(VALIDATED, key) is not None:
        only = []
    checked = list(raw.all_experiments) if only is None else list(only)
    _check_implemented(raw, [n for n in checked if n in raw.all_experiments], origin)
    for exp_name, entry in raw.all_experiments.items():
        expected_name = f"{entry.paper}_{entry.item}"
        if exp_name != expected_name:
            raise ConfigError(
                f"{origin.at([raw.section_of(exp_name), exp_name])}: name must be "
                f"<paper>_<item> = {expected_name!r}"
            )
    validate = _settings_validator(origin)
    settings = {
        exp_name: validate(raw, exp_name) for exp_name in checked if exp_name in raw.all_experiments
    }
    if key is not None and only is None:
        write_entry(VALIDATED, key, "")  # a mark: validated in full
    return Params(raw, settings, validate, file)
