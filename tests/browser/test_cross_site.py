"""Links to the UI clicked on another site's page (a chat message, a mail, an alert): the
browser sends no `SameSite=Strict` cookie on that navigation nor on its redirects, so the UI
must go on from a page of its own before it can see the session."""

from __future__ import annotations

import json
import re

from playwright.sync_api import Page, expect

from tests.browser.conftest import ContextFactory
from tests.browser.harness import UiServer

CHAT = "http://chat.example/"


def click_from_chat(page: Page, url: str) -> None:
    """Open a page of another site that links to `url`, and click the link."""
    page.route(
        CHAT,
        lambda route: route.fulfill(
            status=200, content_type="text/html", body=f'<a href="{url}">open runlane</a>'
        ),
    )
    page.goto(CHAT)
    page.get_by_role("link", name="open runlane").click()


def test_a_login_link_clicked_on_another_site_opens_the_jobs_page(
    ui: UiServer, new_context: ContextFactory
) -> None:
    made = ui.cli("token", "login-link", "viewer-person", "--url", ui.base_url, "--json")
    page = new_context().new_page()
    click_from_chat(page, json.loads(made.stdout)["url"])
    expect(page).to_have_url(re.compile(r"/jobs$"))
    expect(page.get_by_role("heading", name="Jobs", exact=True)).to_be_visible()


def test_a_link_clicked_on_another_site_opens_its_page_in_a_live_session(
    ui: UiServer, new_context: ContextFactory
) -> None:
    page = new_context("operator").new_page()
    click_from_chat(page, f"{ui.base_url}/jobs/report")
    expect(page).to_have_url(re.compile(r"/jobs/report$"))
    expect(page.get_by_role("heading", name="report")).to_be_visible()
