"""`app.PagesFirst`: the web UI's router is tried before the API's routes, for the pages'
own sections only, and every path still reaches the route it reached before."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.routing import Match

from runlane.api.app import PagesFirst, create_app, page_sections
from runlane.service.config import Settings


def test_the_sections_are_the_pages_first_segments() -> None:
    sections = page_sections()
    assert {"", "login", "logout", "jobs", "runs", "chains", "chain-runs", "events"} <= sections
    assert not sections & {"api", "healthz", "readyz", "metrics", "mcp", "static"}


@pytest.mark.parametrize(
    ("path", "pages"),
    [
        ("/runs", True),
        ("/runs/0f2c6d1e", True),
        ("/jobs/nightly", True),
        ("/", True),
        ("/api/v1/runs", False),
        ("/healthz", False),
        ("/static/app.css", False),
        ("/runsx", False),
    ],
)
def test_only_a_page_path_is_matched_by_the_pages(tmp_path: Path, path: str, pages: bool) -> None:
    app = create_app(
        Settings(database_url=f"sqlite:///{tmp_path / 'r.db'}", catalog_path=str(tmp_path))
    )
    first = app.router.routes[0]
    assert isinstance(first, PagesFirst)
    scope = {"type": "http", "method": "GET", "path": path, "root_path": "", "headers": []}
    match, _ = first.matches(scope)
    assert (match == Match.FULL) is pages


def test_a_page_path_starting_with_a_parameter_is_refused() -> None:
    with pytest.raises(ValueError, match="parameter"):
        PagesFirst(object(), frozenset({"{job}"}))  # type: ignore[arg-type]
