"""How the UI's pages are rendered: one Jinja2 environment (autoescape on for every
template), the helpers every template may call, and `page()`, which renders a template into
an HTML response with the UI's security headers.

Helpers (template globals): `when(dt, zone=None)` a time as `<time>`, always labelled with its
zone; `status_badge(status)`; `short_id(id)`; `csrf_field()` the hidden CSRF input of the page's
session; `duration(seconds)`. The context of every page has `request`, `requester` (who is
logged in, None on the login page), `csrf_token`, `flash` (messages of the last redirect) and
`nav` (the active section). `nav_links(nav)` the navigation's items and
`select_options(values, selected)` a select's options, each built once and kept. `asset(name)` is the versioned URL of a file of `static/`
(`/static/app.css?v=<hash>`), which the server lets the browser keep for good.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import urllib.parse
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo

import jinja2
from fastapi import Request
from fastapi.responses import HTMLResponse
from markupsafe import Markup, escape

# The policy of every page (docs/ui.md): scripts, styles and requests only from the server
# itself, no inline script or style, no framing, no plugins, forms post only here.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; "
    "object-src 'none'"
)
PAGE_HEADERS: Mapping[str, str] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",  # pages show live state, and who is logged in
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
}
NAV = (
    ("jobs", "Jobs", "/jobs"),
    ("runs", "Runs", "/runs"),
    ("chains", "Chains", "/chains"),
    ("events", "Events", "/events"),
    ("launchers", "Launchers", "/launchers"),
    ("schedule", "Schedule", "/schedule"),
)
SHORT_ID_CHARS = 8
ASSET_VERSION_PARAM = "v"


@lru_cache(maxsize=32)
def asset(name: str) -> str:
    """The URL of `static/<name>` with a hash of its content: a new release's file gets a new
    URL, so the browser may cache each URL for good (`runlane.web.UiStaticFiles`)."""
    data = importlib.resources.files("runlane.web").joinpath("static", name).read_bytes()
    version = hashlib.sha256(data).hexdigest()[:12]
    return f"/static/{name}?{ASSET_VERSION_PARAM}={version}"


STATUS_CLASSES = frozenset(
    {"queued", "running", "success", "failure", "timeout", "skipped", "cancelled"}
)


@lru_cache(maxsize=256)
def _zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def _stamp(utc: datetime) -> str:
    return (
        f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T"
        f"{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}Z"
    )


def _wall(at: datetime) -> str:
    return f"{at.year:04d}-{at.month:02d}-{at.day:02d} {at.hour:02d}:{at.minute:02d}"


# The helpers below build their few tags with f-strings around `escape()`d values, not
# `Markup.format`: a jobs page calls them thousands of times, and format costs ten times more.
def _built(html: str) -> Markup:
    """HTML a helper below built: every value in it went through `escape()`, or is digits
    and names the helper wrote itself."""
    return Markup(html)  # noqa: S704 - see above: nothing unescaped reaches it


def when(at: datetime | None, zone: str | None = None, *, empty: str = "—") -> Markup:
    """`at` as `<time datetime="…Z" data-zone="zone">YYYY-MM-DD HH:MM UTC</time>`: the text is
    UTC and says so; the zone switch (app.js) rewrites it in the viewer's or `zone` (the job's)
    zone, labelled again. None renders `empty`."""
    if at is None:
        return _built(f'<span class="none">{escape(empty)}</span>')
    utc = at.astimezone(UTC) if at.tzinfo else at.replace(tzinfo=UTC)
    if zone:
        return _built(
            f'<time datetime="{_stamp(utc)}" data-zone="{escape(zone)}">{_wall(utc)} UTC</time>'
        )
    return _built(f'<time datetime="{_stamp(utc)}">{_wall(utc)} UTC</time>')


def in_zone(at: datetime, zone: str) -> Markup:
    """`at` in `zone`, labelled with the zone's name, for text that stays in that zone (a
    schedule's slots in the schedule's own zone)."""
    local = at.astimezone(_zone(zone))
    stamp = _stamp(at.astimezone(UTC))
    return _built(f'<time datetime="{stamp}" data-fixed="1">{_wall(local)} {escape(zone)}</time>')


def status_badge(status: object) -> Markup:
    """A run (or chain run) status as a coloured badge whose text is the status."""
    text = str(getattr(status, "value", status))
    css = text if text in STATUS_CLASSES else "other"
    return _built(f'<span class="badge status-{css}">{escape(text)}</span>')


def short_id(run_id: str | None) -> str:
    """The first characters of an id: enough to tell runs apart on a page (`runlane` takes
    a prefix of 6 or more)."""
    return (run_id or "")[:SHORT_ID_CHARS]


def duration(seconds: float | None) -> str:
    """`1h 02m`, `3m 04s`, `5.2s`; an em dash for None."""
    if seconds is None:
        return "—"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


_NO_VALUE = '<span class="none">—</span>'


def _text(value: str) -> str:
    """`value` with what `escape()` replaces replaced, as a str (no Markup object): for the
    run rows, where it is three times cheaper than `escape()` or `str.translate`."""
    return (
        value.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&#34;")
        .replace("'", "&#39;")
    )


def _time_cell(at: datetime | None, zone_attr: str) -> str:
    """`when(at, zone)` as text, for the run rows: the same tag from `isoformat()`'s text
    (one C call) instead of formatting each field."""
    if at is None:
        return _NO_VALUE
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    elif at.utcoffset():
        at = at.astimezone(UTC)
    iso = at.isoformat()
    return f'<time datetime="{iso[:19]}Z"{zone_attr}>{iso[:10]} {iso[11:16]} UTC</time>'


@lru_cache(maxsize=1024)
def _job_link(job: str) -> str:
    """`<a href="/jobs/JOB">JOB</a>` (the catalog's few names, each quoted once)."""
    return f'<a href="/jobs/{urllib.parse.quote(job, safe="/")}">{_text(job)}</a>'


@lru_cache(maxsize=256)
def _cell(value: str | None) -> str:
    """A cell of a value of few kinds (a status badge's text, a trigger, a requester)."""
    return _text(value) if value else _NO_VALUE


@lru_cache(maxsize=64)
def _badge(status: str) -> str:
    """`status_badge(status)` as text."""
    return str(status_badge(status))


def _attempt_note(attempt: int) -> str:
    return f' <span class="count">attempt {int(attempt)}</span>' if attempt > 1 else ""


def _run_row(
    run_id: str,
    job: str,
    attempt: int,
    status: str,
    trigger: str,
    requested_by: str | None,
    queued: datetime,
    started: datetime | None,
    finished: datetime | None,
    zone_attr: str,
) -> str:
    """One row of `run_rows`, from the values it shows (and nothing else: `_cached_row` keys
    on them)."""
    safe_id = _text(run_id)
    return (
        f'<tr data-run-id="{safe_id}" data-queued-at="{queued.isoformat()}">\n'
        f'  <th scope="row"><a href="/runs/{safe_id}" class="mono">'
        f"{_text(run_id[:SHORT_ID_CHARS])}</a></th>\n"
        f"  <td>{_job_link(job)}{_attempt_note(attempt)}</td>\n"
        f'  <td data-col="status">{_badge(status)}</td>\n'
        f"  <td>{_cell(trigger)}</td>\n"
        f"  <td>{_cell(requested_by)}</td>\n"
        f'  <td data-col="queued_at">{_time_cell(queued, zone_attr)}</td>\n'
        f'  <td data-col="started_at">{_time_cell(started, zone_attr)}</td>\n'
        f'  <td data-col="finished_at">{_time_cell(finished, zone_attr)}</td>\n'
        "</tr>\n"
    )


# A run list shows mostly the rows it showed a moment ago (a page reloaded, runs.js's polls,
# the next visitor), so rows are kept by the values they show: a row seen before is one lookup
# (~1 µs) instead of ~10 µs of formatting and escaping. A status or time that changes is a new
# key, so a row never shows a stale value. Bounded: at most ROW_CACHE_SIZE rows (~1.5 KB each with
# its key: ~6 MB when full, measured), the least recently used dropped first.
ROW_CACHE_SIZE = 4096
_cached_row = lru_cache(maxsize=ROW_CACHE_SIZE)(_run_row)


def run_rows(runs: Iterable[Mapping[str, Any]], zone: str | None = None) -> Markup:
    """The rows of a run table (`_runs.html`; `static/runs.js` adds and updates rows of the
    same form), one per run item (`operations.list_run_items_page`: a dict of `run_dict`'s
    keys, times as aware datetimes); the times as `when(…, zone)` writes them.

    Built here as text rather than in a Jinja macro of `when`/`status_badge` calls: the runs
    page is as busy as the API's run list, and the macro cost it four times what the API
    spends on a page (its many small calls, escapes and Markup objects per cell). Every value
    from the run goes through `_text` (what `escape()` replaces). A row whose times are UTC or
    naive (every row the store reads) comes from `_cached_row`; one with another zone's times
    is built afresh, since two equal times in other zones may be written differently (their
    offsets, a fold)."""
    zone_attr = f' data-zone="{_text(zone)}"' if zone else ""
    out = []
    for run in runs:
        queued = run["queued_at"]
        started = run["started_at"]
        finished = run["finished_at"]
        build = (
            _cached_row
            if (queued.tzinfo is UTC or queued.tzinfo is None)
            and (started is None or started.tzinfo is UTC or started.tzinfo is None)
            and (finished is None or finished.tzinfo is UTC or finished.tzinfo is None)
            else _run_row
        )
        out.append(
            build(
                run["id"],
                run["job"],
                run["attempt"],
                str(run["status"]),
                str(run["trigger"]),
                run["requested_by"],
                queued,
                started,
                finished,
                zone_attr,
            )
        )
    return _built("".join(out))


@lru_cache(maxsize=16)
def nav_links(active: str | None) -> Markup:
    """The main navigation's items (`NAV`), `active` marked as the current page: the same
    few lines on every page, built once per section instead of escaped on each render."""
    current = ' aria-current="page"'
    return _built(
        "\n      ".join(
            f'<li><a href="{_text(href)}"{current if key == active else ""}>{_text(label)}</a></li>'
            for key, label, href in NAV
        )
    )


@lru_cache(maxsize=256)
def select_options(values: tuple[str, ...], selected: str | None) -> Markup:
    """`<option>`s of `values`, the one equal to `selected` selected (a filter's choices: the
    same few on every runs page, built once per choice made)."""
    return _built(
        "".join(
            f"<option{' selected' if value == selected else ''}>{_text(value)}</option>"
            for value in values
        )
    )


@jinja2.pass_context
def csrf_field(context: jinja2.runtime.Context) -> Markup:
    """The hidden CSRF input every form of the page carries (`csrf_token` of the context)."""
    token = escape(context.get("csrf_token") or "")
    return _built(f'<input type="hidden" name="csrf_token" value="{token}">')


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("runlane.web", "templates"),
        autoescape=True,  # every template, whatever its name
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        auto_reload=False,
    )
    env.globals.update(
        when=when,
        in_zone=in_zone,
        status_badge=status_badge,
        short_id=short_id,
        duration=duration,
        csrf_field=csrf_field,
        run_rows=run_rows,
        nav_links=nav_links,
        select_options=select_options,
        asset=asset,
        NAV=NAV,
    )
    return env


templates = _environment()
"""The UI's templates (`runlane/web/templates/`); pages by every author render through it."""


def page_context(request: Request, **context: Any) -> dict[str, Any]:
    """What every template gets besides its own values (see the module docstring)."""
    state = request.state
    base: dict[str, Any] = {
        "request": request,
        "requester": getattr(state, "web_requester", None),
        "csrf_token": getattr(state, "csrf_token", None),
        "flash": getattr(state, "flash", ()),
        "nav": None,
    }
    base.update(context)
    return base


def page(
    request: Request,
    template: str,
    status: int = 200,
    *,
    headers: Mapping[str, str] | None = None,
    **context: Any,
) -> HTMLResponse:
    """Render `template` with `context` (plus `page_context`) into an HTML response with the
    page headers (CSP, no-store, …) and `headers`."""
    html = templates.get_template(template).render(page_context(request, **context))
    response = HTMLResponse(html, status_code=status, headers={**PAGE_HEADERS, **(headers or {})})
    for cookie in getattr(request.state, "clear_cookies", ()):
        # A browser takes a `__Host-` cookie's removal only when it is Secure too.
        response.delete_cookie(cookie, path="/", secure=cookie.startswith("__Host-"))
    return response


def text_of(value: object) -> str:
    """`value` as escaped text (for messages built outside templates)."""
    return str(escape(value))
