"""The documentation: README.md and the MkDocs site in docs/.

The site builds in strict mode without a warning; every relative link of the README and of
the pages resolves (to a file, and for ``#anchor`` to a heading of that file); the README
stays a short guide; and no page, nor any other tracked text file (code, claims, settings,
benchmarks), refers to a tracker number, to files a reader of a public clone does not have,
or to a path on one machine.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from .conftest import REPO

README = REPO / "README.md"
DOCS = REPO / "docs"
README_MAX_LINES = 250

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
HTML_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto:, ...

FORBIDDEN = {
    "a tracker number": re.compile(r"\b(?:issues?|stop)\s+\d+", re.IGNORECASE),
    "the replication specs": re.compile(r"shared/spec[s]|\bspec [A-D]\b|\bspec §"),
    "a path on one machine": re.compile(r"/work/|/root/|/home/"),
}


def _documents() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def _prose(text: str) -> str:
    """The text without code blocks, inline code and comments: links and headings there are
    examples, not part of the document."""
    return INLINE_CODE.sub("", FENCE.sub("", HTML_COMMENT.sub("", text)))


def slug(heading: str) -> str:
    """The anchor of a heading as MkDocs (Python-Markdown's toc) makes it; for the plain
    ASCII headings used here, GitHub makes the same."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.replace("*", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {slug(h) for h in HEADING.findall(text)}


def _links(path: Path) -> list[str]:
    return LINK.findall(_prose(path.read_text(encoding="utf-8")))


@pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None,
    reason='mkdocs is not installed (pip install -e ".[docs]")',
)
def test_the_site_builds_strictly_without_warnings(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "WARNING" not in output, output
    # The anchors this file computes are the ids MkDocs gives the headings.
    for page in DOCS.glob("*.md"):
        html = tmp_path / ("index.html" if page.stem == "index" else f"{page.stem}/index.html")
        ids = set(re.findall(r'<h[1-6] id="([^"]+)"', html.read_text(encoding="utf-8")))
        assert anchors(page) <= ids, (page.name, anchors(page) - ids)


def test_mkdocs_lists_every_page() -> None:
    text = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    assert re.search(r"^docs_dir:\s*docs\s*$", text, re.MULTILINE)
    listed = set(re.findall(r":\s*([\w-]+\.md)\s*$", text, re.MULTILINE))
    assert listed == {p.name for p in DOCS.glob("*.md")}


@pytest.mark.parametrize("document", _documents(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_relative_links_resolve(document: Path) -> None:
    problems = []
    for link in _links(document):
        if EXTERNAL.match(link):
            continue
        target, _, anchor = link.partition("#")
        path = (document.parent / target).resolve() if target else document
        if not path.is_file():
            problems.append(f"{link}: no file {path.relative_to(REPO.resolve())}")
            continue
        if document.parent == DOCS and DOCS.resolve() not in path.parents:
            problems.append(f"{link}: outside docs/ (MkDocs cannot link there; name the file)")
        if anchor and anchor not in anchors(path):
            problems.append(f"{link}: no heading with the anchor #{anchor}")
    assert not problems, "\n".join(problems)


def test_the_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) < README_MAX_LINES, f"README.md has {len(lines)} lines"


@pytest.mark.parametrize("document", _documents(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_no_tracker_numbers_specs_or_machine_paths(document: Path) -> None:
    text = document.read_text(encoding="utf-8")
    found = [
        f"line {text.count(chr(10), 0, match.start()) + 1}: {what}: {match.group(0)!r}"
        for what, pattern in FORBIDDEN.items()
        for match in pattern.finditer(text)
    ]
    assert not found, "\n".join(found)


def _tracked_text_files() -> list[Path]:
    """Every file git tracks that reads as UTF-8 text, but this one (it spells the patterns)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    files = []
    for name in filter(None, listed):
        path = REPO / name
        if path == Path(__file__) or not path.is_file():
            continue
        try:
            path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # a figure, a checkpoint: not text
        files.append(path)
    return files


@pytest.mark.skipif(not (REPO / ".git").exists(), reason="not a git checkout")
def test_no_tracked_file_cites_a_tracker_the_specs_or_a_machine_path() -> None:
    """Code, claims, settings and benchmarks stand on their own as the pages do: a reader of
    a public clone can follow every citation."""
    found = [
        f"{path.relative_to(REPO)}:{text.count(chr(10), 0, match.start()) + 1}: {what}: "
        f"{match.group(0)!r}"
        for path in _tracked_text_files()
        for text in [path.read_text(encoding="utf-8")]
        for what, pattern in FORBIDDEN.items()
        for match in pattern.finditer(text)
    ]
    assert len(_tracked_text_files()) > 100  # the listing works: the check can fail
    assert not found, f"{len(found)} found:\n" + "\n".join(found[:50])


def test_slugs_follow_mkdocs() -> None:
    assert slug("Checkpoints and crash recovery") == "checkpoints-and-crash-recovery"
    assert slug("`snakemake --lint`") == "snakemake-lint"
    assert slug("`lightning_modules/`") == "lightning_modules"
    assert slug("Paper C: Sub-n-grams are near-stationary points") == (
        "paper-c-sub-n-grams-are-near-stationary-points"
    )
