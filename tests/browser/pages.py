"""What the browser tests do on a page: log in through the form, run axe-core, check the
`<time>` elements, watch for script that should never run, and save screenshots."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, expect

from tests.browser.harness import AXE_SCRIPT, artifacts_dir

# The global every hostile payload of the seeded catalog and of the tests tries to set.
PWNED = "__pwned"


def log_in(page: Page, token: str, *, path: str = "/login") -> None:
    """Log in through the form as a person does (field `token`, button "Log in"), then wait
    until the browser has left the login page."""
    page.goto(path)
    page.locator("input[name=token]").fill(token)
    page.get_by_role("button", name="Log in").click()
    expect(page).not_to_have_url(re.compile(r"/login(\?|$)"))


@cache
def _axe_source() -> str:
    return AXE_SCRIPT.read_text()


def axe_violations(page: Page, *, impacts: tuple[str, ...] = ("serious", "critical")) -> list[Any]:
    """axe-core's violations of `impacts` on the page as loaded. The script is evaluated
    through the DevTools protocol (`page.evaluate`), which the page's CSP does not govern, so
    the CSP stays as served; `add_script_tag` would insert an inline script the CSP refuses."""
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(_axe_source())
    found: list[dict[str, Any]] = page.evaluate(
        """async () => (await axe.run(document, {resultTypes: ['violations']})).violations
             .map(v => ({id: v.id, impact: v.impact, help: v.help,
                         nodes: v.nodes.slice(0, 5).map(n => n.target.join(' '))}))"""
    )
    return [v for v in found if v["impact"] in impacts]


def time_problems(page: Page) -> list[str]:
    """Every `<time>` element whose `datetime` does not end in Z or whose visible text names
    no zone (UTC, an offset, or a zone name such as Europe/Paris or CET)."""
    problems: list[str] = page.evaluate(
        r"""() => [...document.querySelectorAll('time')].flatMap(t => {
              const when = t.getAttribute('datetime') || '';
              const text = (t.innerText || t.textContent || '').trim();
              const out = [];
              if (!/^\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d(\.\d+)?)?Z$/.test(when))
                out.push(`datetime=${JSON.stringify(when)} does not end in Z`);
              if (!/(UTC|GMT|[+-]\d\d(:?\d\d)?|\b[A-Z][a-z]+\/[A-Za-z_]+|\b[A-Z]{3,5}\b)/.test(text)
                  && !t.querySelector('abbr, .zone'))
                out.push(`"${text}" (datetime ${when}) shows no zone`);
              return out;
            })"""
    )
    return problems


def pwned(page: Page) -> bool:
    """Whether any hostile payload ran in the page."""
    return bool(page.evaluate(f"() => window.{PWNED} !== undefined"))


def screenshot(page: Page, name: str) -> Path:
    """A full-page screenshot under the artifacts directory, as `name`.png."""
    path = artifacts_dir() / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
