"""The docs cannot rot: every full catalog they show (a YAML block that starts with `version:`)
passes `runlane catalog check`, and the `catalog check` output the catalog reference shows is
what the command prints."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from .test_cli import no_traceback, runlane

ROOT = Path(__file__).resolve().parents[2]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
REFERENCE = ROOT / "docs" / "catalog-reference.md"
MANY_ERRORS = ROOT / "tests" / "fixtures" / "catalogs" / "many_errors.yaml"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def blocks(path: Path, lang: str) -> list[str]:
    return [body for kind, body in FENCE.findall(path.read_text()) if kind == lang]


def full_catalogs() -> list[tuple[str, str]]:
    found = []
    for path in DOC_FILES:
        for i, body in enumerate(b for b in blocks(path, "yaml") if b.startswith("version:")):
            found.append((f"{path.relative_to(ROOT)}#{i + 1}", body))
    return found


CATALOGS = full_catalogs()


def check_transcripts() -> list[list[str]]:
    """The catalog reference's `$ runlane catalog check catalog.yaml` blocks, each as lines."""
    return [
        body.splitlines()[1:]
        for body in blocks(REFERENCE, "text")
        if body.startswith("$ runlane catalog check catalog.yaml\n")
    ]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return dict(
        os.environ,
        RUNLANE_DATABASE_URL=f"sqlite:///{tmp_path / 'unused.db'}",
        RUNLANE_CATALOG=str(tmp_path / "no-such-default.yaml"),
        RUNLANE_LOG_LEVEL="warning",
        COLUMNS="300",  # long problem lines are printed whole, as in the docs
    )


def test_the_catalog_reference_main_example_is_found() -> None:
    assert any(name.startswith("docs/catalog-reference.md#1") for name, _ in CATALOGS), CATALOGS


@pytest.mark.parametrize(("name", "text"), CATALOGS, ids=[name for name, _ in CATALOGS])
def test_every_full_catalog_in_the_docs_is_valid(
    name: str, text: str, env: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(text)
    proc = runlane("catalog", "check", "--catalog", str(path), env=env)
    no_traceback(proc)
    assert proc.returncode == 0, f"{name}:\n{proc.stderr}"


def test_the_reference_shows_the_output_catalog_check_prints(
    env: dict[str, str], tmp_path: Path
) -> None:
    ok_transcript, errors_transcript = check_transcripts()
    # The main example, saved as catalog.yaml and checked as the reference shows.
    (tmp_path / "catalog.yaml").write_text(dict(CATALOGS)["docs/catalog-reference.md#1"])
    ok = runlane("catalog", "check", "catalog.yaml", env=env, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines() == ok_transcript
    # The many-errors fixture: the problems, then the summary last.
    shutil.copy(MANY_ERRORS, tmp_path / "catalog.yaml")
    bad = runlane("catalog", "check", "catalog.yaml", env=env, cwd=tmp_path)
    no_traceback(bad)
    assert bad.returncode == 1
    assert bad.stdout == ""
    assert bad.stderr.splitlines() == errors_transcript
    assert errors_transcript[-1] == "error: catalog.yaml: 19 errors"
