"""A job's page in the browser: the run form from the params allowlist (the browser refuses a
wrong type before the server does, and the server refuses it too), the `acts` confirmation
(dismissing starts nothing; typing the name starts the run), and pause with a reason, snooze
until a time, resume."""

from __future__ import annotations

import re
from collections.abc import Callable

from playwright.sync_api import Page, expect

from tests.browser.harness import UiServer

RUN_PAGE = re.compile(r"/runs/([0-9a-f-]{36})$")


def validity(page: Page, selector: str) -> dict[str, bool]:
    found: dict[str, bool] = page.locator(selector).evaluate(
        "el => ({valid: el.validity.valid, missing: el.validity.valueMissing,"
        " step: el.validity.stepMismatch, bad: el.validity.badInput})"
    )
    return found


def test_run_with_typed_params_the_browser_and_server_both_check_types(
    ui: UiServer, page_as: Callable[..., Page]
) -> None:
    before = len(ui.runs_of("report"))
    page = page_as("operator")
    page.goto("/jobs/report")
    form = page.locator("form.run-form")
    count = form.get_by_label("count")
    assert count.get_attribute("type") == "number"
    assert count.get_attribute("step") == "1"
    # The catalog's types in the browser: a required int left empty, then a fraction.
    form.get_by_role("button", name="Run").click()
    assert validity(page, "form.run-form [name=param_count]")["missing"]
    count.fill("1.5")
    form.get_by_role("button", name="Run").click()
    assert validity(page, "form.run-form [name=param_count]")["step"]
    expect(page).to_have_url(re.compile(r"/jobs/report$"))
    assert form.get_by_label("mode").evaluate("el => el.tagName") == "SELECT"
    assert len(ui.runs_of("report")) == before

    # The same wrong value with the browser's checks switched off: the server refuses it.
    form.evaluate("f => { f.noValidate = true; }")
    count.evaluate("el => { el.type = 'text'; }")
    count.fill("many")
    with page.expect_response(re.compile(r"/jobs/report/run$")) as answer:
        form.get_by_role("button", name="Run").click()
    assert 400 <= answer.value.status < 500
    expect(page.get_by_role("alert")).to_contain_text("count")
    assert len(ui.runs_of("report")) == before

    page.goto("/jobs/report")
    form.get_by_label("count").fill("7")
    form.get_by_label("label").fill("weekly")
    form.get_by_label("mode").select_option("slow")
    form.get_by_label("dry").select_option("true")
    form.get_by_role("button", name="Run").click()
    expect(page).to_have_url(RUN_PAGE)
    run_id = RUN_PAGE.search(page.url).group(1)  # type: ignore[union-attr]
    run = ui.finished(run_id)
    assert run["params"] == {"count": 7, "label": "weekly", "mode": "slow", "dry": True}
    assert (run["trigger"], run["requested_by"]) == ("manual", "operator-person")


def test_an_acts_job_starts_only_when_its_name_is_typed(
    ui: UiServer, page_as: Callable[..., Page]
) -> None:
    page = page_as("operator")
    page.goto("/jobs/trade")
    page.get_by_role("button", name="Run").click()
    confirm = page.get_by_label(re.compile("Type the job's name"))
    expect(confirm).to_be_visible()
    page.get_by_role("link", name="Dismiss").click()
    expect(page).to_have_url(re.compile(r"/jobs/trade$"))
    expect(page.get_by_role("button", name="Confirm")).to_have_count(0)
    assert ui.runs_of("trade") == []

    page.get_by_role("button", name="Run").click()
    confirm.fill("trad")  # a name typed wrong: refused by the server
    with page.expect_response(re.compile(r"/jobs/trade/run$")) as answer:
        page.get_by_role("button", name="Confirm").click()
    assert answer.value.status == 422
    assert ui.runs_of("trade") == []

    page.get_by_label(re.compile("Type the job's name")).fill("trade")
    page.get_by_role("button", name="Confirm").click()
    expect(page).to_have_url(RUN_PAGE)
    (run,) = ui.runs_of("trade")
    assert ui.finished(run["id"])["status"] == "success"


def test_pause_with_a_reason_snooze_until_and_resume(
    ui: UiServer, page_as: Callable[..., Page]
) -> None:
    page = page_as("operator")
    page.goto("/jobs/sync")
    pause = page.locator("form.pause-form")
    pause.get_by_label("Reason").fill("league offline")
    pause.get_by_role("button", name="Pause").click()
    expect(page.locator("h1 .badge.paused")).to_have_text("paused")
    expect(page.locator("h1 .reason")).to_have_text("league offline")
    job = ui.job("sync")
    assert (job["paused"], job["paused_until"], job["pause_reason"]) == (
        True,
        None,
        "league offline",
    )
    page.goto("/jobs")
    row = page.get_by_role("row").filter(has=page.get_by_role("link", name="sync", exact=True))
    expect(row).to_contain_text("league offline")

    page.goto("/jobs/sync")
    pause.get_by_label("Reason").fill("maintenance window")
    pause.get_by_label("Snooze until").fill("2031-05-04T12:30")
    pause.get_by_role("button", name="Pause").click()
    expect(page.locator("h1 .badge.paused")).to_have_text("snoozed")
    expect(page.locator("h1 .until time")).to_have_attribute("datetime", "2031-05-04T12:30:00Z")
    assert ui.job("sync")["paused_until"] == "2031-05-04T12:30:00Z"

    page.get_by_role("button", name="Resume").click()
    expect(page.locator("h1 .badge.paused")).to_have_count(0)
    assert ui.job("sync")["paused"] is False
