"""Who looks at a page: the `WebViewer` and `WebOperator` dependencies of the UI's routes,
the session cookie, the CSRF checks, flash messages, and the route class that renders every
error of a page as an HTML page.

A browser is identified by its session cookie (`runlane_session`, `__Host-runlane_session`
over HTTPS; opened by the login page:
`service.operations.sessions`), or, in trusted-proxy mode, by the proxy's user headers (the
HTTP server that mounts the UI hands over its check as `app.state.proxy_requester`, so the
rule is written once, in `runlane.api.auth`). A browser that is neither is sent to
`/login?next=<path>`. A POST also needs the CSRF token of its session (`csrf_token` field);
the role and job scope of a write are checked by the operation it calls.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Coroutine
from typing import Annotated, Any

import structlog
from fastapi import Depends, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse
from fastapi.routing import APIRoute

from runlane.core.access import Role
from runlane.errors import CsrfRefused, InvalidArgument, RunlaneError, Unauthenticated
from runlane.service.operations import Requester
from runlane.service.operations import sessions as web_sessions
from runlane.service.runtime import Runtime

SESSION_COOKIE = "runlane_session"
# The session cookie's name over HTTPS: a browser keeps a `__Host-` cookie only when it is
# Secure, has Path=/ and no Domain, so no other host (a sibling subdomain) and no plain-HTTP
# answer can plant one, and a session of another's choosing cannot be slipped in (fixation).
# Over HTTPS only this name is read: a cookie without the prefix may have come from anywhere.
HOST_SESSION_COOKIE = "__Host-" + SESSION_COOKIE
FLASH_COOKIE = "runlane_flash"
# The flash message's cookie over HTTPS: Secure, and `__Host-` for the session cookie's reasons
# (no other host plants a message of its own; over HTTPS only this name is read).
HOST_FLASH_COOKIE = "__Host-" + FLASH_COOKIE
MAX_FLASH_CHARS = 300
log = structlog.get_logger("runlane.web")


class LoginRequired(Exception):
    """Raised by `WebViewer` for a browser with no session: answered 303 to the login page."""

    def __init__(self, next_path: str) -> None:
        super().__init__(next_path)
        self.next_path = next_path


async def runtime_of(request: Request) -> Runtime:
    """The app's runtime (opened by the HTTP server's lifespan). Async although it awaits
    nothing: FastAPI runs a plain `def` dependency in a worker thread, which cost each page
    a thread handoff (~0.5 ms)."""
    runtime: Runtime = request.app.state.runtime
    return runtime


WebRuntime = Annotated[Runtime, Depends(runtime_of)]


def is_https(request: Request) -> bool:
    """Whether the browser reached us over HTTPS: the request's scheme, or X-Forwarded-Proto
    when it comes from a trusted proxy (from anyone else the header is ignored). Behind a chain
    of proxies the header is a list, the scheme the client used first (`https, http`)."""
    if request.url.scheme == "https":
        return True
    trusts: Callable[[Request], bool] | None = getattr(request.app.state, "proxy_trusted", None)
    if trusts is not None and trusts(request):
        first = request.headers.get("x-forwarded-proto", "").split(",")[0]
        return first.strip().lower() == "https"
    return False


def session_cookie_name(request: Request) -> str:
    """The session cookie's name for `request`: `__Host-runlane_session` over HTTPS,
    `runlane_session` over plain HTTP (where a browser refuses a `__Host-` cookie)."""
    return HOST_SESSION_COOKIE if is_https(request) else SESSION_COOKIE


def session_cookie(request: Request) -> str | None:
    """The secret of the session cookie `request` carries under its name for the scheme."""
    return request.cookies.get(session_cookie_name(request))


def set_session_cookie(response: Response, request: Request, secret: str, max_age: int) -> None:
    """The session cookie: HttpOnly, SameSite=Strict, Path=/; over HTTPS Secure, and named
    with the `__Host-` prefix (a cookie of an older version without it is removed)."""
    secure = is_https(request)
    response.set_cookie(
        session_cookie_name(request),
        secret,
        max_age=max_age,
        path="/",
        httponly=True,
        samesite="strict",
        secure=secure,
    )
    if secure and SESSION_COOKIE in request.cookies:
        response.delete_cookie(
            SESSION_COOKIE, path="/", httponly=True, samesite="strict", secure=True
        )


def clear_session_cookie(response: Response, request: Request) -> None:
    response.delete_cookie(
        session_cookie_name(request),
        path="/",
        httponly=True,
        samesite="strict",
        secure=is_https(request),
    )


def safe_next(path: str | None) -> str:
    """A `next` target that stays on this site: a path starting with one `/` (never `//host`
    or a scheme); `/jobs` otherwise. No control character either: a browser's URL parser drops
    tabs and newlines, so `/<TAB>/host` would be `//host`."""
    if not path or not path.startswith("/") or path.startswith("//") or "\\" in path:
        return "/jobs"
    if not path.isprintable() or len(path) > 2000:
        return "/jobs"
    return path


def redirect(request: Request, url: str, *, flash: str | None = None) -> RedirectResponse:
    """303 to `url` (a POST's answer: the browser then GETs it), with a message for the next
    page when `flash` is given: its cookie is Secure and named `__Host-runlane_flash` when
    `request` came over HTTPS, as the session cookie is."""
    response = RedirectResponse(url, status_code=303)
    if flash:
        response.set_cookie(
            flash_cookie_name(request),
            urllib.parse.quote(flash[:MAX_FLASH_CHARS]),
            path="/",
            httponly=True,
            samesite="strict",
            secure=is_https(request),
        )
    return response


def flash_cookie_name(request: Request) -> str:
    """The flash cookie's name for `request`: `__Host-runlane_flash` over HTTPS."""
    return HOST_FLASH_COOKIE if is_https(request) else FLASH_COOKIE


def _take_flash(request: Request) -> None:
    name = flash_cookie_name(request)
    text = request.cookies.get(name)
    if text:
        request.state.flash = (urllib.parse.unquote(text)[:MAX_FLASH_CHARS],)
        request.state.clear_cookies = (name,)


async def _identify(request: Request, rt: Runtime) -> Requester:
    proxy: Callable[[Request], Requester | None] | None = getattr(
        request.app.state, "proxy_requester", None
    )
    found = proxy(request) if proxy is not None else None
    if found is not None:
        request.state.web_proxy = True
        return found
    secret = session_cookie(request)
    requester = await web_sessions.session_requester(rt, secret)
    request.state.session_secret = secret
    request.state.csrf_token = web_sessions.csrf_token(secret or "")
    return requester


def return_path(request: Request) -> str:
    """Where the browser goes back to once logged in: this page for a GET; for a form's POST,
    the page the form was on (its Referer, when it is of this site), else `/jobs`: a form's
    action answers no GET."""
    if request.method in ("GET", "HEAD"):
        return request.url.path + (f"?{request.url.query}" if request.url.query else "")
    referer = urllib.parse.urlsplit(request.headers.get("referer", ""))
    if referer.netloc and referer.netloc == request.headers.get("host", request.url.netloc):
        return safe_next(referer.path + (f"?{referer.query}" if referer.query else ""))
    return "/jobs"


def cross_site_navigation(request: Request) -> bool:
    """Whether the browser says this GET is a navigation another site's page started (a link
    in a chat or a mail): it then sends no `SameSite=Strict` cookie, on this request nor on
    any redirect of it, so a live session looks absent."""
    headers = request.headers
    return (
        request.method == "GET"
        and headers.get("sec-fetch-site", "").strip().lower() == "cross-site"
        and headers.get("sec-fetch-mode", "").strip().lower() == "navigate"
    )


def continue_page(request: Request, target: str) -> Response:
    """A page that sends the browser on to `target` (a path of this site) by a navigation of
    its own (`<meta http-equiv="refresh">`, and a link): one this site started, which carries
    the session cookie where a redirect of another site's navigation would not."""
    from runlane.web.render import page

    return page(request, "continue.html", target=safe_next(target), nav=None)


async def web_viewer(request: Request, rt: WebRuntime) -> Requester:
    """Whoever may read the UI: a live session's token, or the trusted proxy's user. A browser
    with neither is redirected to `/login?next=<this path>` (`return_path`)."""
    try:
        requester = await _identify(request, rt)
    except Unauthenticated:
        raise LoginRequired(return_path(request)) from None
    requester.require(Role.VIEWER, action="read")
    request.state.web_requester = requester
    _take_flash(request)
    return requester


WebViewer = Annotated[Requester, Depends(web_viewer)]
"""A browser that may read (any role)."""


async def web_operator(request: Request, rt: WebRuntime) -> Requester:
    """A browser that posts a form: identified as `WebViewer` is, and the form's `csrf_token`
    must be its session's (403 `csrf_refused` otherwise; nothing is done). A trusted proxy's
    user has no session: its forms are checked by origin (`check_same_origin`). The role and
    scope are the operation's to check."""
    requester = await web_viewer(request, rt)
    form = await request.form()
    sent = form.get("csrf_token")
    if getattr(request.state, "web_proxy", False):
        check_same_origin(request)
        return requester
    web_sessions.check_csrf(
        getattr(request.state, "session_secret", None), sent if isinstance(sent, str) else None
    )
    return requester


WebOperator = Annotated[Requester, Depends(web_operator)]
"""A browser that posts a form with its session's CSRF token."""


def check_same_origin(request: Request) -> None:
    """`csrf_refused` for a POST that a browser says came from another site: `Sec-Fetch-Site`
    other than same-origin (or none, a typed URL), or an `Origin` that is not this server's.
    A client that sends neither (not a browser) passes: it cannot be forged into sending."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site.strip().lower() not in ("same-origin", "none"):
        raise CsrfRefused("the form was posted from another site: nothing was done")
    origin = request.headers.get("origin")
    if origin is not None:
        own = f"{request.url.scheme}://{request.url.netloc}"
        host = request.headers.get("host")
        allowed = {own} | ({f"http://{host}", f"https://{host}"} if host else set())
        if origin.strip().rstrip("/") not in allowed:
            raise CsrfRefused("the form was posted from another site: nothing was done")


def remote_of(request: Request) -> str | None:
    """The TCP peer's address, as the audit log records it."""
    return request.client.host if request.client else None


def render_error(request: Request, exc: RunlaneError) -> Response:
    """An error of a page as a page: its code and message, with the error's HTTP status."""
    from runlane.web.render import page

    return page(
        request,
        "error.html",
        status=exc.http_status,
        code=exc.code,
        message=exc.message,
        nav=None,
    )


def answering_errors(
    handler: Callable[[Request], Coroutine[Any, Any, Response]],
) -> Callable[[Request], Coroutine[Any, Any, Response]]:
    """`handler` with a page's answers to errors: a `LoginRequired` becomes 303 to the login
    page, any `RunlaneError` a page (error.html) with its status."""

    async def handle(request: Request) -> Response:
        try:
            return await handler(request)
        except LoginRequired as exc:
            if cross_site_navigation(request):
                # Another site's link: the session cookie may be live but withheld. Go on
                # from this site, where it is sent (none: that request is sent to log in).
                return continue_page(request, exc.next_path)
            query = urllib.parse.urlencode({"next": safe_next(exc.next_path)})
            return RedirectResponse(f"/login?{query}", status_code=303)
        except RequestValidationError as exc:
            # A query parameter FastAPI refused (`/schedule?days=99`): a page, as any refusal.
            problems = "; ".join(
                f"parameter {'.'.join(str(p) for p in e.get('loc', ())[1:]) or 'request'!r}: "
                f"{e.get('msg', 'invalid')}"
                for e in exc.errors()
            )
            return render_error(request, InvalidArgument(problems or "the request is invalid"))
        except RunlaneError as exc:
            if exc.http_status >= 500:
                log.warning("web.page_failed", code=exc.code, path=request.url.path)
            return render_error(request, exc)

    return handle


class PageRoute(APIRoute):
    """The UI's routes: a `LoginRequired` becomes 303 to the login page, and any `RunlaneError`
    a page (error.html) with its status, never a JSON problem or a traceback."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        return answering_errors(super().get_route_handler())


class ViewerPageRoute(PageRoute):
    """A busy page that only reads: its endpoint is `async def page(request, rt: WebRuntime,
    who: WebViewer)` and takes nothing else (it reads its query itself), so it is called with
    `runtime_of` and `web_viewer` directly, in that order, as FastAPI would call them, without
    FastAPI's per-request solving of its parameters (a tenth of the runs page's own CPU, which
    is to be the API's: the API's run list does the same, `api.routes.runs.RunListRoute`).
    An endpoint with any other parameter is refused when the route is made; one included with
    its router's dependencies when FastAPI builds that handler (at the first request): never
    called without them."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        dependant = _effective_dependant(self)
        solved = [d.call for d in dependant.dependencies]
        extra = (
            dependant.path_params
            or dependant.query_params
            or dependant.header_params
            or dependant.cookie_params
            or dependant.body_params
        )
        if extra or solved != [runtime_of, web_viewer] or self.methods != {"GET"}:
            raise TypeError(
                f"{self.path}: a ViewerPageRoute endpoint takes (request, rt: WebRuntime, "
                "who: WebViewer) only, for GET, with no dependencies of its router"
            )
        endpoint = self.endpoint

        async def direct(request: Request) -> Response:
            rt = await runtime_of(request)
            who = await web_viewer(request, rt)
            response: Response = await endpoint(request, rt, who)
            return response

        return answering_errors(direct)


def _effective_dependant(route: APIRoute) -> Any:
    """The dependant FastAPI solves for `route` as it is included (its routers' dependencies
    combined with its own), found as `APIRoute.get_route_handler` finds it (FastAPI 0.165's
    included-route context; without one, the route's own)."""
    from fastapi import routing

    var = getattr(routing, "_effective_route_context_var", None)
    context = var.get() if var is not None else None
    if context is not None and context.original_route is route:
        return context.dependant
    return route.dependant
