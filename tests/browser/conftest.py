"""Fixtures of the browser tests: one `runlane serve` per session (module `harness`), one
headless Chromium per session, and a logged-in browser context per role. Each role logs in
once through the login form; its cookie is reused by the contexts the tests open."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Playwright, sync_playwright

from tests.browser.harness import (
    CHROMIUM_ARGS,
    STEP_TIMEOUT_MS,
    UiServer,
    axe_script,
    chromium_executable,
    serving,
)
from tests.browser.pages import log_in
from tests.support.waiting import eventually_sync


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.browser)
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(60))


@pytest.fixture(scope="session")
def axe() -> Path:
    return axe_script()


@pytest.fixture(scope="session")
def playwright_driver() -> Iterator[Playwright]:
    chromium_executable()  # skip (or fail in CI) before starting the driver
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="session")
def browser(playwright_driver: Playwright) -> Iterator[Browser]:
    launched = playwright_driver.chromium.launch(
        executable_path=chromium_executable(), headless=True, args=list(CHROMIUM_ARGS)
    )
    try:
        yield launched
    finally:
        launched.close()


@pytest.fixture(scope="session")
def ui(tmp_path_factory: pytest.TempPathFactory, browser: Browser) -> Iterator[UiServer]:
    """The server the browser tests talk to (started after the browser: no browser, no server)."""
    with serving(tmp_path_factory.mktemp("ui")) as server:
        yield server


@pytest.fixture(scope="session")
def sessions(ui: UiServer, browser: Browser) -> dict[str, Any]:
    """Each role's storage state after logging in through the form, once per session."""
    states: dict[str, Any] = {}
    for role, token in ui.tokens.items():
        context = browser.new_context(base_url=ui.base_url)
        try:
            log_in(context.new_page(), token)
            states[role] = context.storage_state()
        finally:
            context.close()
    return states


ContextFactory = Callable[..., BrowserContext]


@pytest.fixture
def new_context(
    ui: UiServer, browser: Browser, sessions: dict[str, Any]
) -> Iterator[ContextFactory]:
    """`new_context(role=None, **options)`: a browser context on the server, logged in as
    `role` (None: anonymous); closed when the test ends. Options go to Playwright
    (`color_scheme="dark"`, `java_script_enabled=False`, ...)."""
    opened: list[BrowserContext] = []

    def make(role: str | None = None, **options: Any) -> BrowserContext:
        if role is not None:
            options.setdefault("storage_state", sessions[role])
        context = browser.new_context(base_url=ui.base_url, **options)
        context.set_default_timeout(STEP_TIMEOUT_MS)
        opened.append(context)
        return context

    yield make
    for context in opened:
        context.close()


@pytest.fixture
def page_as(new_context: ContextFactory) -> Callable[..., Page]:
    """`page_as(role, **options)`: a new page in a logged-in context of its own."""

    def make(role: str | None, **options: Any) -> Page:
        return new_context(role, **options).new_page()

    return make


@pytest.fixture(scope="session")
def seeded(ui: UiServer) -> dict[str, str]:
    """Finished runs of every kind the pages show, queued through the API once per session:
    a success with params, a failure, a run whose output is hostile markup, and a chain run
    (success, failure, a finish edge that runs, a success edge that is skipped)."""
    ids = {
        "success": ui.queue("report", count=3, mode="fast"),
        "failure": ui.queue("broken"),
        "hostile": ui.queue("hostile"),
    }
    chain = ui.run_chain("nightly")
    for run_id in ids.values():
        ui.finished(run_id)
    wait_for_chain(ui, chain)
    ids["chain"] = chain
    return ids


def wait_for_chain(ui: UiServer, chain_run_id: str) -> dict[str, Any]:
    return eventually_sync(
        lambda: (found := ui.chain_run(chain_run_id))["finished_at"] is not None and found,
        f"chain run {chain_run_id} ends",
        within=60,
        poll=0.2,
    )
