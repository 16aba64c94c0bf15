"""The chains pages through the real server (SQLite and PostgreSQL) on seeded data: the chains
with their steps and Run (with the typed confirmation for a chain that acts), refused for a
viewer, and a chain run's SVG graph: one box per step with its status, edges by kind."""

from __future__ import annotations

import re

from runlane.service import operations
from tests.api.test_endpoints import audit_rows
from tests.web.conftest import csrf_of, logged_in
from tests.web.pages_seed import Seeded, seeded

__all__ = ["seeded"]

STEP = re.compile(r'<g class="step status-([a-z]+)" data-step="([^"]+)" data-status="([a-z]+)">')
EDGE = re.compile(
    r'<path class="edge on-(success|finish)" d="[^"]+" fill="none" stroke-width="2"( stroke-dasharray="6 4")? marker-end="url\(#arrow\)" data-from="([^"]+)" data-to="([^"]+)">'
)


def chain_runs(seeded: Seeded, chain: str) -> list[str]:
    views = seeded.server.call(lambda rt: operations.list_chain_runs(rt, limit=100))
    return [v.run.id for v in views if v.run.chain == chain]


def test_the_chain_run_graph_has_a_box_per_step_and_edges_by_kind(seeded: Seeded) -> None:
    with logged_in(seeded.server, "viewer") as c:
        r = c.get(f"/chain-runs/{seeded.chain_run[:8]}")
    assert r.status_code == 200
    steps = {name: (css, status) for css, name, status in STEP.findall(r.text)}
    assert steps == {
        "first": ("success", "success"),
        "second": ("failure", "failure"),
        "third": ("skipped", "skipped"),
        "cleanup": ("success", "success"),
    }
    # The status is in words in each box too, not only its colour.
    for status in ("success", "failure", "skipped"):
        assert f'class="step-status">{status}</text>' in r.text
    edges = {(src, dst): (on, bool(dashed)) for on, dashed, src, dst in EDGE.findall(r.text)}
    assert edges == {
        ("first", "second"): ("success", False),
        ("second", "third"): ("success", False),
        ("second", "cleanup"): ("finish", True),
    }
    assert "<code>on: success</code>" in r.text  # the legend
    assert "<code>on: finish</code>" in r.text
    view = seeded.server.call(lambda rt: operations.show_chain_run(rt, seeded.chain_run))
    for step in view.steps:
        if step.run_id is not None:
            assert f'<a href="/runs/{step.run_id}">' in r.text


def test_a_step_run_links_back_to_its_chain_run(seeded: Seeded) -> None:
    view = seeded.server.call(lambda rt: operations.show_chain_run(rt, seeded.chain_run))
    with logged_in(seeded.server, "viewer") as c:
        r = c.get(f"/runs/{view.steps[0].run_id}")
    assert f'<a href="/chain-runs/{seeded.chain_run}"' in r.text


def test_chains_list_their_steps_and_run_for_an_operator_only(seeded: Seeded) -> None:
    with logged_in(seeded.server, "viewer") as viewer:
        seen = viewer.get("/chains")
        assert seen.status_code == 200
        assert "flow" in seen.text
        assert "cleanup" in seen.text
        assert 'class="on on-finish">on finish</span>' in seen.text
        assert ">Run</button>" not in seen.text
        before = len(chain_runs(seeded, "flow"))
        forged = viewer.post("/chains/flow/run", data={"csrf_token": csrf_of(seen.text)})
    assert forged.status_code == 403
    assert len(chain_runs(seeded, "flow")) == before
    with logged_in(seeded.server, "operator") as operator:
        page = operator.get("/chains")
        assert page.text.count(">Run</button>") == 2
        started = operator.post("/chains/flow/run", data={"csrf_token": csrf_of(page.text)})
    assert started.status_code == 303
    new = set(chain_runs(seeded, "flow"))
    assert len(new) == before + 1
    assert started.headers["location"].startswith("/chain-runs/")
    assert started.headers["location"].removeprefix("/chain-runs/") in new
    assert any(
        e.target == "flow" and e.outcome == "ok" for e in audit_rows(seeded.server, "run_chain")
    )


def test_a_chain_that_acts_needs_its_name_typed(seeded: Seeded) -> None:
    with logged_in(seeded.server, "operator") as c:
        page = c.get("/chains")
        token = csrf_of(page.text)
        asked = c.post("/chains/guarded/run", data={"csrf_token": token})
        assert asked.status_code == 200
        assert "Type the chain's name" in asked.text
        assert '<button type="submit">Confirm</button>' in asked.text
        assert chain_runs(seeded, "guarded") == []  # asking started nothing
        wrong = c.post("/chains/guarded/run", data={"csrf_token": token, "confirm": "flow"})
        assert wrong.status_code == 422
        assert "confirmation_required" in wrong.text
        assert chain_runs(seeded, "guarded") == []
        right = c.post("/chains/guarded/run", data={"csrf_token": token, "confirm": "guarded"})
    assert right.status_code == 303
    assert len(chain_runs(seeded, "guarded")) == 1


def test_an_unknown_chain_run_is_a_404_page(seeded: Seeded) -> None:
    with logged_in(seeded.server, "viewer") as c:
        r = c.get("/chain-runs/" + "e" * 32)
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("text/html")
