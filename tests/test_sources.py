"""An experiment's sources are every project module its job imports, and their digest
follows the code's meaning, not its bytes (replicate/sources.py)."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from replicate.sources import (
    SYNTAX,
    _module_file,
    _syntax,
    claims_sources,
    experiment_sources,
    imported_files,
    source_digest,
)

from .conftest import REPO

pytestmark = pytest.mark.workflow(seconds=60)
_parse_source = ast.parse

JOBS = ("attn_markov_fig3", "local_global_fig5", "subngrams_fig1", "two_layer_table1")
"""A training of each of papers A, C and D and a flow of paper B, run tiny."""


def _imported_at_run_time(args: list[str], cwd: Path) -> set[str]:
    """The project files a `python -m replicate ...` process imported (``-X importtime``
    names every module it loaded), relative to the repository."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-X", "importtime", "-m", "replicate", *args]
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    modules = re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s+(\S+)$", done.stderr, re.MULTILINE)
    names = [n.strip() for n in modules]
    files = {_module_file(name, REPO) for name in names}
    return {f for f in files if f is not None} | {"replicate/__main__.py"}


@pytest.mark.parametrize("name", JOBS)
def test_the_sources_cover_every_module_a_job_imports(
    name: str, tiny_params_file: Path, tmp_path: Path
) -> None:
    """Run the job (tiny settings) and compare what it imported with the static closure:
    nothing it ran is missing, so no edit that changes its outputs goes unseen."""
    ran = _imported_at_run_time(["--params", str(tiny_params_file), "run", name], tmp_path)
    assert f"replicate/experiments/{name.split('_')[0]}" not in ran  # sanity: files, not dirs
    assert ran <= set(experiment_sources(name, REPO)), ran - set(experiment_sources(name, REPO))


def test_the_claims_sources_cover_what_the_claims_step_imports(
    tiny_params_file: Path, tmp_path: Path
) -> None:
    ran = _imported_at_run_time(["--params", str(tiny_params_file), "claims"], tmp_path)
    assert ran <= set(claims_sources(REPO)), ran - set(claims_sources(REPO))


def test_a_job_does_not_depend_on_the_other_commands_or_papers() -> None:
    """The command line dispatches to other commands inside functions: their modules (the
    claims, the stability check) are not an experiment's sources, nor another paper's."""
    sources = set(experiment_sources("attn_markov_fig3", REPO))
    assert {"replicate/cli.py", "replicate/experiments/attn_markov/fig3.py"} <= sources
    assert not sources & {"replicate/claims.py", "replicate/stability.py", "replicate/report.py"}
    assert not any(f.startswith("replicate/experiments/two_layer/") for f in sources)
    assert "replicate/experiments/attn_markov/fig5.py" not in sources  # a module of its paper


def _package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_relative_lazy_and_type_checking_imports(tmp_path: Path) -> None:
    """Relative imports resolve against the importing module's package, imports inside a
    function count, annotation-only imports (``if TYPE_CHECKING``) do not, except in a
    package's ``__init__.py``, where they name its lazily imported submodules (PEP 562)."""
    _package(
        tmp_path,
        {
            "replicate/__init__.py": "",
            "replicate/a/__init__.py": "",
            "replicate/a/main.py": (
                "from typing import TYPE_CHECKING\n"
                "from . import near\n"
                "from ..b import far\n"
                "if TYPE_CHECKING:\n    from replicate.b import typed\n"
                "def f():\n    import lightning_modules\n"
            ),
            "replicate/a/near.py": "",
            "replicate/b/__init__.py": "",
            "replicate/b/far.py": "",
            "replicate/b/typed.py": "",
            "lightning_modules/__init__.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from lightning_modules.model import Model\n"
            ),
            "lightning_modules/model.py": "import torch\n",
            "replicate/unused.py": "",
        },
    )
    assert imported_files(["replicate/a/main.py"], tmp_path) == (
        "lightning_modules/__init__.py",
        "lightning_modules/model.py",
        "replicate/__init__.py",
        "replicate/a/__init__.py",
        "replicate/a/main.py",
        "replicate/a/near.py",
        "replicate/b/__init__.py",
        "replicate/b/far.py",
    )


def test_the_digest_follows_the_meaning_not_the_bytes(tmp_path: Path) -> None:
    """A comment, a reformat or a docstring edit (an attribute's included) leaves the digest
    as it was; a changed constant, a renamed file or a changed import does not."""
    module = tmp_path / "replicate" / "m.py"
    module.parent.mkdir()
    original = (
        '"""Doc."""\n\nA = 1\n"""Doc of A."""\n\ndef f(x):\n    """Doc."""\n    return x + A\n'
    )
    module.write_text(original)
    digest = source_digest(["replicate/m.py"], tmp_path)

    def digest_of(text: str) -> str:
        module.write_text(text)
        os.utime(module, ns=(module.stat().st_mtime_ns + 10**9,) * 2)  # a new file to the cache
        return source_digest(["replicate/m.py"], tmp_path)

    assert (
        digest_of('"""Other."""\nA = 1  # one\ndef f( x ):  # a comment\n    return (x+A)\n')
        == digest
    )
    assert (
        digest_of('A = 1\n"""Other doc of A."""\ndef f(x):\n    "Doc."\n    return x + A\n')
        == digest
    )
    assert digest_of("A = 1\ndef f(x):\n    return x + A + 1\n") != digest
    assert digest_of("A = 2\ndef f(x):\n    return x + A\n") != digest
    assert digest_of("import replicate.other\nA = 1\ndef f(x):\n    return x + A\n") != digest
    module.write_text(original)
    shutil.copy(module, module.with_name("n.py"))
    assert source_digest(["replicate/n.py"], tmp_path) != digest


def test_parsed_files_are_cached_by_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file's parse is kept in the user's cache under its name and bytes: a fresh process
    (here: the in-process cache cleared) reads it instead of parsing; an unreadable entry is
    parsed again and replaced; the digest is the same either way, and changes with the file."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    _package(tmp_path, {"replicate/__init__.py": "", "replicate/m.py": "import replicate.n\n",
                        "replicate/n.py": "X = 1\n"})  # fmt: skip
    files = ["replicate/m.py", "replicate/n.py"]
    parsed = source_digest(files, tmp_path)
    entries = sorted((tmp_path / "cache" / "markov-replicate" / SYNTAX).iterdir())
    assert len(entries) == 2
    _syntax.cache_clear()
    calls = []
    monkeypatch.setattr(ast, "parse", lambda *a, **k: calls.append(a) or _parse_source(*a, **k))
    assert source_digest(files, tmp_path) == parsed and not calls  # read from the cache
    assert imported_files(["replicate/m.py"], tmp_path)[-1] == "replicate/n.py"
    for entry in entries:
        entry.write_text("{not json")
    _syntax.cache_clear()
    calls.clear()
    assert source_digest(files, tmp_path) == parsed  # parsed again:
    assert sorted(call[0] for call in calls) == [b"X = 1\n", b"import replicate.n\n"]
    assert all(entry.read_text().startswith('{"dump"') for entry in entries)
    (tmp_path / "replicate" / "n.py").write_text("X = 2\n")
    assert source_digest(files, tmp_path) != parsed
    # Entries made under other parsing rules (another version of replicate/sources.py) are
    # never read: they may strip or follow other things.
    (tmp_path / "replicate" / "n.py").write_text("X = 1\n")
    _syntax.cache_clear()
    calls.clear()
    monkeypatch.setattr("replicate.sources.PARSE_RULES", "other rules")
    assert source_digest(files, tmp_path) == parsed
    assert sorted(call[0] for call in calls) == [b"X = 1\n", b"import replicate.n\n"]
