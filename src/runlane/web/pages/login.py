"""Log in (with a token, or a one-time login link), log out, and `/` (the jobs page).

The login form has no session yet, so its CSRF protection is a double-submit cookie (the form's
`csrf_token` must equal the `runlane_login` cookie the form's page set) plus the browser's own
word on where the post came from (`Sec-Fetch-Site`, `Origin`: `session.check_same_origin`).
"""

from __future__ import annotations

import hmac
import secrets
import urllib.parse
from typing import Annotated

from fastapi import APIRouter, Form, Request, Response
from fastapi.responses import RedirectResponse

from runlane.errors import CsrfRefused, Unauthenticated
from runlane.service.operations import sessions as web_sessions
from runlane.web.render import page
from runlane.web.session import (
    PageRoute,
    WebOperator,
    WebRuntime,
    check_same_origin,
    clear_session_cookie,
    continue_page,
    is_https,
    redirect,
    safe_next,
    set_session_cookie,
)

LOGIN_COOKIE = "runlane_login"  # the login form's double-submit CSRF value
LOGIN_COOKIE_AGE = 3600

router = APIRouter(route_class=PageRoute, include_in_schema=False)


def _login_page(
    request: Request, next_path: str, *, status: int = 200, error: str | None = None
) -> Response:
    value = request.cookies.get(LOGIN_COOKIE) or secrets.token_urlsafe(24)
    request.state.csrf_token = value
    response = page(request, "login.html", status=status, next_path=next_path, error=error)
    response.set_cookie(
        LOGIN_COOKIE,
        value,
        max_age=LOGIN_COOKIE_AGE,
        path="/login",
        httponly=True,
        samesite="strict",
        secure=is_https(request),
    )
    return response


def _logged_in(
    request: Request, opened: web_sessions.SessionOpened, next_path: str, *, link: bool = False
) -> Response:
    """The session's cookie, and the browser sent to `next_path`: by a 303 after the form's
    POST; by a page of this site after a login link (`continue_page`), which is often opened
    from another site (a chat, a mail), whose navigation's redirect would not carry the new
    `SameSite=Strict` cookie: the browser would land on the login form, the code spent."""
    if link:
        response = continue_page(request, next_path)
    else:
        response = RedirectResponse(safe_next(next_path), status_code=303)
    set_session_cookie(response, request, opened.secret, opened.max_age)
    response.delete_cookie(LOGIN_COOKIE, path="/login")
    return response


@router.get("/")
async def home() -> Response:
    return RedirectResponse("/jobs", status_code=303)


@router.get("/login")
async def login_form(
    request: Request, rt: WebRuntime, next: str | None = None, code: str | None = None
) -> Response:
    """The login form; with `code` (a one-time login link) the session opens at once."""
    target = safe_next(next)
    if code is not None:
        try:
            opened = await web_sessions.open_session_with_code(rt, code)
        except Unauthenticated as exc:
            return _login_page(request, target, status=401, error=exc.message)
        return _logged_in(request, opened, target, link=True)
    return _login_page(request, target)


@router.post("/login")
async def login(
    request: Request,
    rt: WebRuntime,
    token: Annotated[str, Form(max_length=600)] = "",
    csrf_token: Annotated[str, Form(max_length=200)] = "",
    next: Annotated[str, Form(max_length=2000)] = "/jobs",
) -> Response:
    """Open a session with a token's secret; a bad token re-renders the form (401)."""
    expected = request.cookies.get(LOGIN_COOKIE)
    # (`compare_digest` takes ASCII text only: anything else is not the value this page set.)
    if (
        not expected
        or not (expected.isascii() and csrf_token.isascii())
        or not hmac.compare_digest(expected, csrf_token)
    ):
        raise CsrfRefused("the login form's CSRF token is missing or wrong: reload the page")
    check_same_origin(request)
    try:
        opened = await web_sessions.open_session(rt, token)
    except Unauthenticated:
        return _login_page(
            request,
            safe_next(next),
            status=401,
            error="That token is not valid (unknown, expired or revoked).",
        )
    return _logged_in(request, opened, next)


@router.post("/logout")
async def logout(request: Request, rt: WebRuntime, _who: WebOperator) -> Response:
    """End the session (its row is deleted) and go to the login page."""
    await web_sessions.close_session(rt, getattr(request.state, "session_secret", None))
    response = redirect(request, "/login?" + urllib.parse.urlencode({"next": "/jobs"}))
    clear_session_cookie(response, request)
    return response
