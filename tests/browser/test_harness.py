"""The checks the browser tests rely on, on pages of their own: the browser is the Chromium the
setup named, axe-core runs under a CSP as strict as the UI's and reports what it should, and
the `<time>` check catches a bare or unlabelled time. A check that cannot fail proves nothing."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Browser, Route

from tests.browser.pages import axe_violations, time_problems

STRICT_CSP = "default-src 'self'; script-src 'self'; style-src 'self'; frame-ancestors 'none'"


def test_axe_runs_under_a_strict_csp_and_reports_serious_violations(
    browser: Browser, axe: Path
) -> None:
    page = browser.new_page()
    try:

        def serve(route: Route) -> None:
            route.fulfill(
                status=200,
                headers={"content-type": "text/html", "content-security-policy": STRICT_CSP},
                body='<html lang="en"><title>t</title><main><h1>t</h1>'
                '<img src="data:,"><button></button></main></html>',
            )

        page.route("http://csp.test/", serve)
        page.goto("http://csp.test/")
        found = {v["id"]: v["impact"] for v in axe_violations(page)}
        assert found == {"image-alt": "critical", "button-name": "critical"}
        # The page's own CSP still holds: an inline script it did not send is refused.
        page.evaluate(
            "() => { const s = document.createElement('script');"
            " s.textContent = 'window.inline = 1'; document.body.append(s); }"
        )
        assert page.evaluate("() => window.inline") is None
    finally:
        page.close()


def test_the_time_check_flags_a_time_without_z_or_zone(browser: Browser) -> None:
    page = browser.new_page()
    try:
        page.set_content(
            '<time datetime="2026-12-02T07:00:00Z">2026-12-02 07:00 UTC</time>'
            '<time datetime="2026-12-02T08:00:00Z">08:00 <abbr title="Europe/Paris">CET</abbr></time>'
            '<time datetime="2026-12-02T07:00:00+01:00">07:00 CET</time>'
            '<time datetime="2026-12-02T07:00:00Z">07:00</time>'
        )
        assert time_problems(page) == [
            'datetime="2026-12-02T07:00:00+01:00" does not end in Z',
            '"07:00" (datetime 2026-12-02T07:00:00Z) shows no zone',
        ]
    finally:
        page.close()
