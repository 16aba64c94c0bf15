"""`token create|list|revoke|login-link` (the HTTP API's bearer tokens, and one-time links
into the web UI) and `audit` (what was written
through the API). The local CLI holds the database itself, so it needs no token: whoever can run
these commands against the database is its admin."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer

from runlane.cli.failures import one_line_errors
from runlane.cli.options import DatabaseOpt, JsonOpt, cli_requester, settings_from, with_runtime
from runlane.cli.output import out, print_columns, print_json, short_time, terminal_safe
from runlane.service.runtime import Runtime
from runlane.service.views import audit_dict, iso, token_dict

if TYPE_CHECKING:
    from runlane.service.operations import TokenInfo


def _jobs_text(jobs: tuple[str, ...]) -> str:
    return ",".join(jobs) if jobs else "*"


def _state(info: TokenInfo, now: datetime) -> str:
    if info.revoked_at is not None:
        return "revoked"
    if info.expires_at is not None and info.expires_at <= now:
        return "expired"
    return "active"


@one_line_errors
def token_create_cmd(
    name: Annotated[str, typer.Argument(metavar="NAME", help="1-64 of A-Z a-z 0-9 . _ @ -")],
    role: Annotated[
        str, typer.Option("--role", help="viewer (reads), operator (also writes), admin.")
    ],
    jobs: Annotated[
        list[str] | None,
        typer.Option("--jobs", help="Limit the token's writes to jobs matching GLOB (repeat)."),
    ] = None,
    expires: Annotated[
        str | None,
        typer.Option("--expires", help="A duration (30d) or an ISO time [default: never]."),
    ] = None,
    as_json: JsonOpt = False,
    database: DatabaseOpt = None,
) -> None:
    """Create an API token and print its secret, this once."""
    from runlane.service import operations

    settings = settings_from(database=database)
    requester = cli_requester()

    async def create(rt: Runtime) -> None:
        made = await operations.create_token(
            rt, name, role=role, jobs=jobs or (), expires=expires, requester=requester
        )
        if as_json:
            print_json({"secret": made.secret, "token": token_dict(made.token)})
            return
        token = made.token
        until = iso(token.expires_at) or "never"
        out.print(
            f"created token {terminal_safe(token.name)}: role {token.role}, jobs "
            f"{terminal_safe(_jobs_text(token.jobs))}, expires {until}",
            markup=False,
        )
        out.print(made.secret, markup=False)
        out.print("this secret is shown once and cannot be shown again: store it now")

    with_runtime(settings, create, catalog=False)


@one_line_errors
def token_list_cmd(as_json: JsonOpt = False, database: DatabaseOpt = None) -> None:
    """List the API tokens (never their secrets), revoked and expired ones too."""
    from runlane.service import operations

    settings = settings_from(database=database)
    requester = cli_requester()

    async def show(rt: Runtime) -> None:
        tokens = await operations.list_tokens(rt, requester=requester)
        if as_json:
            print_json([token_dict(t) for t in tokens])
            return
        if not tokens:
            out.print("no tokens (`runlane token create NAME --role viewer` makes one)")
            return
        now = datetime.now(UTC)
        print_columns(
            ("name", "role", "jobs", "prefix", "state", "created", "expires", "last used"),
            (
                (
                    terminal_safe(t.name),
                    t.role.value,
                    terminal_safe(_jobs_text(t.jobs)),
                    t.prefix,
                    _state(t, now),
                    short_time(t.created_at),
                    short_time(t.expires_at) if t.expires_at else "never",
                    short_time(t.last_used_at) if t.last_used_at else "never",
                )
                for t in tokens
            ),
        )

    with_runtime(settings, show, catalog=False)


@one_line_errors
def token_revoke_cmd(
    name: Annotated[str, typer.Argument(metavar="NAME")],
    as_json: JsonOpt = False,
    database: DatabaseOpt = None,
) -> None:
    """Revoke an API token: its next request is refused."""
    from runlane.service import operations

    settings = settings_from(database=database)
    requester = cli_requester()

    async def revoke(rt: Runtime) -> None:
        info = await operations.revoke_token(rt, name, requester=requester)
        if as_json:
            print_json(token_dict(info))
        else:
            out.print(f"revoked token {terminal_safe(info.name)}", markup=False)

    with_runtime(settings, revoke, catalog=False)


@one_line_errors
def token_login_link_cmd(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The token the link logs in as.")],
    role: Annotated[
        str | None,
        typer.Option(
            "--role",
            help="Make NAME as a new token with this role (its secret shown to nobody) "
            "[default: NAME exists].",
        ),
    ] = None,
    jobs: Annotated[
        list[str] | None,
        typer.Option("--jobs", help="With --role: limit its writes to jobs matching GLOB."),
    ] = None,
    expires: Annotated[
        str | None,
        typer.Option("--expires", help="With --role: a duration (30d) or an ISO time."),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            help="The UI's address as a browser reaches it (https://runlane.example.com) "
            "[default: from RUNLANE_HTTP_ADDR].",
        ),
    ] = None,
    as_json: JsonOpt = False,
    database: DatabaseOpt = None,
) -> None:
    """Print a one-time link that logs a browser into the web UI as token NAME (valid 15
    minutes, once), as `runlane serve` does for the first admin; --role makes NAME first."""
    from runlane.api.server import browser_url
    from runlane.errors import InvalidArgument
    from runlane.service.operations import sessions

    settings = settings_from(database=database)
    requester = cli_requester()
    if url is not None:
        base = url.strip().rstrip("/")
        if not base.startswith(("http://", "https://")) or "?" in base or "#" in base:
            raise InvalidArgument(f"--url {url!r}: expected http:// or https:// and a host")
    else:
        listen = settings.http_listen
        if listen is None:
            raise InvalidArgument("RUNLANE_HTTP_ADDR is off: give --url, the UI's address")
        base = browser_url(*listen)

    async def make(rt: Runtime) -> None:
        made = await sessions.token_login_link(
            rt, name, requester=requester, role=role, jobs=jobs or (), expires=expires
        )
        link = made.link.url(base)
        minutes = int(made.link.ttl_seconds // 60)
        if as_json:
            print_json(
                {
                    "url": link,
                    "expires_in_seconds": int(made.link.ttl_seconds),
                    "created": made.created,
                    "token": token_dict(made.token),
                }
            )
            return
        token = made.token
        if made.created:
            out.print(
                f"created token {terminal_safe(token.name)}: role {token.role}, jobs "
                f"{terminal_safe(_jobs_text(token.jobs))}, expires "
                f"{iso(token.expires_at) or 'never'} (its secret is shown to nobody)",
                markup=False,
            )
        out.print(
            f"log in to the web UI as {terminal_safe(token.name)} with this one-time link "
            f"(valid {minutes} minutes, once):",
            markup=False,
        )
        out.print(f"    {link}", markup=False, soft_wrap=True)

    with_runtime(settings, make, catalog=False)


@one_line_errors
def audit_cmd(
    limit: Annotated[int, typer.Option("--limit", "-n", help="At most N entries, 1 to 500.")] = 50,
    as_json: JsonOpt = False,
    database: DatabaseOpt = None,
) -> None:
    """What was written through the API, newest first: who, what, on what, when, from where,
    and the outcome."""
    from runlane.service import operations

    settings = settings_from(database=database)

    async def show(rt: Runtime) -> None:
        page = await operations.list_audit(rt, limit=limit)
        if as_json:
            print_json([audit_dict(e) for e in page.items])
            return
        if not page.items:
            out.print("no audit entries")
            return
        print_columns(
            ("at", "actor", "action", "target", "outcome", "remote"),
            (
                (
                    iso(e.at) or "-",
                    terminal_safe(e.actor or "-"),
                    terminal_safe(e.action),
                    terminal_safe(e.target or "-"),
                    terminal_safe(e.outcome),
                    terminal_safe(e.remote or "-"),
                )
                for e in page.items
            ),
        )

    with_runtime(settings, show, catalog=False)
