"""Logging in and out, and what a session may not do: the login form, logout ending the
session (its cookie no longer works), a form posted without its CSRF token, and a viewer, who
sees no Run button and whose forged POST is refused."""

from __future__ import annotations

import re
from collections.abc import Callable

from playwright.sync_api import Page, expect

from tests.browser.conftest import ContextFactory
from tests.browser.harness import UiServer


def test_log_in_through_the_form_then_log_out_ends_the_session(
    ui: UiServer, new_context: ContextFactory
) -> None:
    context = new_context()
    page = context.new_page()
    page.goto("/jobs")
    expect(page).to_have_url(re.compile(r"/login\?next=%2Fjobs$"))
    page.locator("input[name=token]").fill("rl_not-a-token")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("alert")).to_be_visible()
    expect(page).to_have_url(re.compile(r"/login"))
    assert not any(c["name"] == "runlane_session" for c in context.cookies())

    page.locator("input[name=token]").fill(ui.tokens["operator"])
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(re.compile(r"/jobs$"))
    expect(page.get_by_role("heading", name="Jobs", exact=True)).to_be_visible()
    (cookie,) = [c for c in context.cookies() if c["name"] == "runlane_session"]
    assert cookie["httpOnly"]
    assert cookie["sameSite"] == "Strict"
    kept = context.storage_state()

    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(re.compile(r"/login"))
    # The cookie the browser had before logging out is dead on the server, not only forgotten.
    again = new_context(storage_state=kept).new_page()
    again.goto("/jobs")
    expect(again).to_have_url(re.compile(r"/login"))


def test_a_form_posted_without_its_csrf_token_is_refused(
    ui: UiServer, page_as: Callable[..., Page]
) -> None:
    before = len(ui.runs_of("report"))
    page = page_as("operator")
    page.goto("/jobs/report")
    form = page.locator("form.run-form")
    form.get_by_label("count").fill("4")
    form.locator("input[name=csrf_token]").evaluate("node => node.remove()")
    with page.expect_response(re.compile(r"/jobs/report/run$")) as answer:
        form.get_by_role("button", name="Run").click()
    assert answer.value.status == 403
    assert len(ui.runs_of("report")) == before


def test_a_viewer_sees_no_run_button_and_a_forged_post_is_refused(
    ui: UiServer, page_as: Callable[..., Page]
) -> None:
    before = len(ui.runs_of("report"))
    page = page_as("viewer")
    page.goto("/jobs")
    expect(page.get_by_role("link", name="report", exact=True)).to_be_visible()
    expect(page.get_by_role("button", name="Run")).to_have_count(0)
    page.goto("/jobs/report")
    expect(page.get_by_role("heading", name="report")).to_be_visible()
    expect(page.get_by_role("button", name="Run")).to_have_count(0)
    expect(page.get_by_role("button", name="Pause")).to_have_count(0)
    # The viewer's own session and CSRF token (from the logout form), posted by hand as a
    # forged form would be: the role check is the server's, not the button's absence.
    csrf = page.locator("input[name=csrf_token]").first.get_attribute("value")
    assert csrf
    for path, form in (
        ("/jobs/report/run", {"csrf_token": csrf, "param_count": "1"}),
        ("/jobs/report/pause", {"csrf_token": csrf, "reason": "forged"}),
    ):
        answer = page.request.post(path, form=form, max_redirects=0)
        assert answer.status == 403, (path, answer.status)
    assert len(ui.runs_of("report")) == before
    assert ui.job("report")["paused"] is False
