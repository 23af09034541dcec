"""Which source files an experiment's outputs depend on, and a digest of what they mean.

A job imports its entry points (`python -m replicate run`: ``replicate/__main__.py``, the
runner, its paper's registry) and the experiment's own module, and through them every
module those import, at module level or inside a function (`imported_files`). Those files,
and no others, shape its outputs: a module no experiment imports, an untracked note or an
editor's swap file beside the code, changes nothing. The claims step likewise depends on
the modules ``replicate/claims.py`` imports (`claims_sources`).

The digest (`source_digest`) is taken over each file's abstract syntax tree without its
docstrings, attributes' documentation strings included (`ast.dump`), not over its bytes: a
comment, a reformat or a reworded docstring leaves the code's meaning, hence the outputs, as
they were, and retrains nothing. Snakemake reruns an experiment when its digest differs from
the one that made its outputs (a rule ``params`` value); the record step compares it with the
one in provenance.json (`replicate.provenance.same_code`). DVC hashes the same files by their
bytes (replicate/dvcfile.py): after an edit that leaves the syntax tree as it was, `dvc status`
names the file as changed while Snakemake plans nothing; `dvc repro` (or `python -m
replicate record`) then records the new bytes without running a job.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from replicate.user_cache import read_entry, write_entry

CODE_ROOT = Path(__file__).resolve().parents[1]
"""The folder that holds the running `replicate` package: the project, in a checkout."""
PACKAGES = ("replicate", "lightning_modules")
"""The project's packages: imports of anything else (torch, the standard library) are the
environment's, pinned by the lock file, not the project's sources."""
RUN_ROOTS = ("replicate/__main__.py", "replicate/experiments/runner.py")
"""What `python -m replicate run NAME` imports besides the experiment's paper and module."""
CLAIMS_ROOTS = ("replicate/__main__.py", "replicate/claims.py")
"""What `python -m replicate claims` and `check` import, besides the experiments' settings
schemas (`claims_sources`)."""
SYNTAX = "syntax"
"""The user cache's entries of parsed project files (`_syntax`)."""
PARSE_RULES = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
"""This module's own digest, part of every cache key: an entry made by other rules (what
counts as a docstring, which imports are followed) is never read as this one's."""
DISPATCHERS = frozenset({"replicate/cli.py"})
"""Modules whose function-level imports belong to commands other than the one a job runs:
only their module-level imports are followed (the `run` command's own, the runner, is among
`RUN_ROOTS`)."""


def _module_file(module: str, root: Path) -> str | None:
    """The project file of a dotted module name (a package's ``__init__.py``), or None."""
    parts = module.split(".")
    if parts[0] not in PACKAGES:
        return None
    base = root.joinpath(*parts)
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate.relative_to(root).as_posix()
    return None


def _package_of(file: str) -> str:
    """The dotted package a project file belongs to (a package's ``__init__.py``: itself)."""
    parts = Path(file).with_suffix("").parts
    return ".".join(parts[:-1])


def _is_type_checking(node: ast.AST) -> bool:
    """An ``if TYPE_CHECKING:`` block: imported for annotations only, never run."""
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


_BLOCKS = (ast.stmt, ast.excepthandler, ast.match_case)


def _import_nodes(tree: ast.Module, file: str) -> Iterator[ast.AST]:
    """The import statements that run, at any depth (in a `DISPATCHERS` module: outside
    functions and classes only). Those under ``if TYPE_CHECKING:`` run in a package's
    ``__init__.py`` only, where they name the submodules that its ``__getattr__`` imports on
    first use (PEP 562: `lightning_modules`); elsewhere they are for annotations."""
    module_level_only = file in DISPATCHERS
    lazy_exports = file.endswith("__init__.py")
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if _is_type_checking(node) and not lazy_exports:
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
            continue
        inner = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        if module_level_only and inner:
            continue
        # Imports are statements: expressions (most of a tree) hold none.
        stack.extend(c for c in ast.iter_child_nodes(node) if isinstance(c, _BLOCKS))


def _imported_modules(file: str, tree: ast.Module) -> Iterator[str]:
    """Every module name an import in ``file`` may load: ``from a import b`` loads ``a`` and,
    where ``b`` is a submodule, ``a.b``."""
    for node in _import_nodes(tree, file):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
            continue
        assert isinstance(node, ast.ImportFrom)
        base = node.module or ""
        if node.level:
            package = _package_of(file).split(".")
            anchor = package[: len(package) - node.level + 1]
            base = ".".join([*anchor, *([base] if base else [])])
        yield base
        yield from (f"{base}.{alias.name}" for alias in node.names)


@functools.cache
def _syntax(path: Path, file: str, mtime_ns: int, size: int) -> tuple[str, tuple[str, ...]]:
    """The dump of ``file``'s syntax tree without its docstrings (`_without_docstrings`: the
    digest's text) and the modules it imports (`_imported_modules`), cached in this process
    by path, modification time and size (the Snakefile asks for each file once per
    experiment), and in the user's cache by the file's name and bytes, Python's version and
    the rules of this module (`PARSE_RULES`): parsing the hundred-odd project files would
    otherwise cost every Snakemake start about five seconds."""
    data = path.read_bytes()
    key = hashlib.sha256(f"{sys.version}\0{PARSE_RULES}\0{file}\0".encode() + data).hexdigest()
    cached = read_entry(SYNTAX, key)
    if cached is not None:
        try:
            entry = json.loads(cached)
            return entry["dump"], tuple(entry["modules"])
        except (ValueError, KeyError, TypeError):
            pass  # unreadable: parsed again and stored over it
    tree = _without_docstrings(ast.parse(data, filename=str(path)))
    dump, modules = ast.dump(tree), tuple(dict.fromkeys(_imported_modules(file, tree)))
    write_entry(SYNTAX, key, json.dumps({"dump": dump, "modules": modules}))
    return dump, modules


def _parse(root: Path, file: str) -> tuple[str, tuple[str, ...]]:
    """`_syntax` of ``file`` under ``root``."""
    path = root / file
    info = path.stat()
    return _syntax(path, file, info.st_mtime_ns, info.st_size)


def _without_docstrings(tree: ast.Module) -> ast.Module:
    """``tree`` without its string statements: the docstrings of the module and of every
    class and function, the documentation strings under attributes, and any other bare string
    (they document the code; nothing the outputs depend on reads them)."""
    for node in ast.walk(tree):
        for name in ("body", "orelse", "finalbody"):
            body = getattr(node, name, None)
            if not isinstance(body, list) or not body or not isinstance(body[0], ast.stmt):
                continue
            kept = [statement for statement in body if not _is_string(statement)]
            setattr(node, name, kept or ([ast.Pass()] if name == "body" else []))
    return tree


def _is_string(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


def _with_packages(file: str, root: Path) -> list[str]:
    """``file`` and the ``__init__.py`` of every package above it (importing a module runs
    them first)."""
    parts = Path(file).parts
    inits = [Path(*parts[:i], "__init__.py").as_posix() for i in range(1, len(parts))]
    return [f for f in inits if f != file and (root / f).is_file()] + [file]


def imported_files(roots: Iterable[str], root: Path) -> tuple[str, ...]:
    """The project files (relative to ``root``, sorted) that importing ``roots`` runs:
    the roots, every module they import at any depth, and the packages above each."""
    seen: set[str] = set()
    todo = [f for r in roots for f in _with_packages(r, root)]
    while todo:
        file = todo.pop()
        if file in seen:
            continue
        seen.add(file)
        todo += [f for f in _imports(root, file) if f not in seen]
    return tuple(sorted(seen))


def _imports(root: Path, file: str) -> tuple[str, ...]:
    """The project files that importing ``file`` alone runs (its imports and the packages
    above them), cached as its syntax is."""
    info = (root / file).stat()
    return _imports_of(root, file, info.st_mtime_ns, info.st_size)


@functools.cache
def _imports_of(root: Path, file: str, mtime_ns: int, size: int) -> tuple[str, ...]:
    _, modules = _syntax(root / file, file, mtime_ns, size)
    found = (_module_file(module, root) for module in modules)
    return tuple(dict.fromkeys(f for m in found if m is not None for f in _with_packages(m, root)))


def experiment_sources(name: str, root: Path) -> tuple[str, ...]:
    """The project files experiment ``name``'s job runs (`imported_files` of `RUN_ROOTS`, its
    paper's registry and its own module, as the registry names it)."""
    from replicate.experiments import REGISTRY, paper_of

    module = _module_file(REGISTRY[name].module, root)
    if module is None:
        raise FileNotFoundError(f"{name}: module {REGISTRY[name].module} not under {root}")
    registry = f"replicate/experiments/{paper_of(name)}/__init__.py"
    return imported_files([*RUN_ROOTS, registry, module], root)


def paper_sources(names: Iterable[str], root: Path) -> tuple[str, ...]:
    """The union of the experiments ``names``' sources, sorted (a DVC stage's code deps)."""
    return tuple(sorted({f for name in names for f in experiment_sources(name, root)}))


def claims_sources(root: Path) -> tuple[str, ...]:
    """The project files the claims step runs: `CLAIMS_ROOTS`, and every experiment's
    registry and module, whose settings schemas it validates at both scales."""
    from replicate.experiments import REGISTRY, paper_of

    registries = {f"replicate/experiments/{paper_of(name)}/__init__.py" for name in REGISTRY}
    modules = {_module_file(REGISTRY[name].module, root) for name in REGISTRY}
    roots = [*CLAIMS_ROOTS, *sorted(registries), *sorted(m for m in modules if m is not None)]
    return imported_files(roots, root)


def source_digest(files: Iterable[str], root: Path) -> str:
    """SHA-256 over ``files`` (relative to ``root``), each as its path and its syntax tree
    without docstrings: the same for a comment, a reformat or a docstring edit."""
    digest = hashlib.sha256()
    for file in files:
        digest.update(f"{file}\0{_parse(root, file)[0]}\0".encode())
    return digest.hexdigest()


def experiment_digest(name: str, root: Path = CODE_ROOT) -> str:
    """`source_digest` of experiment ``name``'s sources under ``root`` (by default the code
    running): provenance.json's ``code_sha256``, and a Snakemake ``params`` value of its
    rule, so that the rule reruns exactly when the code it runs changes meaning."""
    return source_digest(experiment_sources(name, root), root)


def paper_digest(paper: str, root: Path = CODE_ROOT) -> str:
    """`source_digest` of the sources of every experiment paper ``paper`` registers: the
    code a recorded control or stability check of its claims ran
    (`replicate.control_record`, `replicate.stability`)."""
    from replicate.experiments import REGISTRY, paper_of

    names = [name for name in REGISTRY if paper_of(name) == paper]
    return source_digest(paper_sources(names, root), root)
