"""Every page in the browser: axe-core finds no serious or critical violation, every `<time>`
has a `datetime` in UTC and a visible zone, a screenshot in the light and the dark palette;
the live log and status of a running run without a reload, the chain graph's statuses and
edges, hostile markup in a param and in a job's output shown as text, and the login form by
keyboard alone."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.harness import HOSTILE, UiServer
from tests.browser.pages import axe_violations, pwned, screenshot, time_problems

PAGES = {
    "login": "/login",
    "jobs": "/jobs",
    "job": "/jobs/report",
    "job-acts": "/jobs/trade",
    "runs": "/runs",
    "run": "/runs/{success}",
    "run-failed": "/runs/{failure}",
    "chains": "/chains",
    "chain-run": "/chain-runs/{chain}",
    "events": "/events",
    "launchers": "/launchers",
    "schedule": "/schedule",
}


def luminance(page: Page) -> float:
    """The relative brightness (0 black .. 1 white) of the body's computed background."""
    rgb = page.evaluate(
        "() => getComputedStyle(document.body).backgroundColor.match(/\\d+/g).slice(0, 3).map(Number)"
    )
    return float(sum(rgb)) / (3 * 255)


@pytest.mark.parametrize("name", list(PAGES))
def test_every_page_is_accessible_labels_its_times_and_follows_the_palette(
    name: str,
    seeded: dict[str, str],
    page_as: Callable[..., Page],
    axe: Path,
) -> None:
    # One load per page: the light palette's checks, then the same page switched to the dark
    # one (prefers-color-scheme applies at once, as when a person's system switches).
    page = page_as(None if name == "login" else "admin", color_scheme="light")
    answer = page.goto(PAGES[name].format(**seeded))
    assert answer is not None
    assert answer.status == 200
    page.wait_for_load_state("networkidle")
    assert axe_violations(page) == []
    assert time_problems(page) == []
    assert luminance(page) > 0.7
    screenshot(page, f"{name}-light")
    page.emulate_media(color_scheme="dark")
    assert luminance(page) < 0.3
    screenshot(page, f"{name}-dark")


def test_a_running_run_shows_new_lines_and_its_end_without_a_reload(
    ui: UiServer, page_as: Callable[..., Page]
) -> None:
    run_id = ui.queue("slow")
    page = page_as("viewer")
    loads: list[str] = []
    page.on("load", lambda p: loads.append(p.url))
    page.goto(f"/runs/{run_id}")
    log = page.locator("#log")
    expect(log).to_contain_text("tick 11", timeout=30_000)
    expect(page.locator("#run-status")).to_contain_text("success", timeout=15_000)
    assert len(loads) == 1  # the page was never reloaded
    assert ui.run(run_id)["status"] == "success"


def test_new_runs_appear_on_the_runs_page_without_a_reload(
    ui: UiServer, page_as: Callable[..., Page]
) -> None:
    page = page_as("viewer")
    loads: list[str] = []
    page.on("load", lambda p: loads.append(p.url))
    page.goto("/runs")
    run_id = ui.queue("report", count=9)
    expect(page.locator(f"a[href='/runs/{run_id}']").first).to_be_visible(timeout=20_000)
    assert len(loads) == 1


def test_the_chain_graph_shows_each_steps_status_and_edge_kind(
    seeded: dict[str, str], page_as: Callable[..., Page]
) -> None:
    page = page_as("viewer")
    page.goto(f"/chain-runs/{seeded['chain']}")
    steps = page.locator("svg g.step")
    expect(steps).to_have_count(4)
    statuses = {g.get_attribute("data-step"): g.get_attribute("data-status") for g in steps.all()}
    assert statuses == {
        "first": "success",
        "second": "failure",
        "third": "success",
        "fourth": "skipped",
    }
    for g in steps.all():  # colour is never the only signal: the status is written too
        expect(g.locator("text.step-status")).to_have_text(g.get_attribute("data-status") or "")
    finish = page.locator("svg path.edge.on-finish[data-to=third]")
    success = page.locator("svg path.edge.on-success[data-to=fourth]")
    assert finish.get_attribute("stroke-dasharray")
    assert success.get_attribute("stroke-dasharray") is None
    first_link = steps.filter(has=page.locator("text", has_text="first")).locator("a")
    assert re.fullmatch(r"/runs/[0-9a-f-]{36}", first_link.get_attribute("href") or "")


def test_hostile_params_and_output_render_as_inert_text(
    ui: UiServer, seeded: dict[str, str], page_as: Callable[..., Page]
) -> None:
    page = page_as("operator")
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto("/jobs/echo")
    page.locator("form.run-form").get_by_label("text").fill(HOSTILE)
    page.locator("form.run-form").get_by_role("button", name="Run").click()
    expect(page).to_have_url(re.compile(r"/runs/[0-9a-f-]{36}$"))
    run_id = page.url.rsplit("/", 1)[1]
    ui.finished(run_id)
    for path in (f"/runs/{run_id}", f"/runs/{seeded['hostile']}", "/runs", "/jobs/echo"):
        page.goto(path)
        page.wait_for_load_state("networkidle")
        assert page.locator("img[src=x]").count() == 0, path
        assert not pwned(page), path
    page.goto(f"/runs/{seeded['hostile']}")
    expect(page.locator("#log")).to_contain_text(HOSTILE)
    page.goto(f"/runs/{run_id}")
    expect(page.locator("#log")).to_contain_text(HOSTILE)
    assert dialogs == []


def test_the_login_and_run_forms_work_by_keyboard_alone(
    ui: UiServer, page_as: Callable[..., Page]
) -> None:
    page = page_as(None)
    page.goto("/login")
    for _ in range(12):  # Tab from the top of the page until the token field has the focus
        page.keyboard.press("Tab")
        if page.evaluate("() => document.activeElement.name") == "token":
            break
    else:
        pytest.fail("Tab never reached the token field")
    page.keyboard.type(ui.tokens["operator"])
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.textContent.trim()") == "Log in"
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"/jobs$"))

    page.goto("/jobs/report")
    page.locator("form.run-form").get_by_label("count").focus()
    page.keyboard.type("5")
    page.keyboard.press("Enter")  # Enter in a field submits its form
    expect(page).to_have_url(re.compile(r"/runs/[0-9a-f-]{36}$"))
    assert ui.run(page.url.rsplit("/", 1)[1])["params"] == {"count": 5}
