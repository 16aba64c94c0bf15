"""Setting up: version, init, catalog check and schema, db upgrade and status, config, and the
launcher (`serve`)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from runlane import __version__
from runlane.cli import output
from runlane.cli.failures import fail, one_line_errors
from runlane.cli.logging import configure_logging
from runlane.cli.options import CatalogOpt, DatabaseOpt, JsonOpt, run_async, settings_from
from runlane.cli.output import err, out, print_json
from runlane.errors import InvalidArgument, RunlaneError
from runlane.service.config import Settings
from runlane.service.runtime import Runtime, open_runtime


def version() -> None:
    """Print the runlane version."""
    typer.echo(__version__)


@one_line_errors
def init(
    directory: Annotated[Path, typer.Argument(help="Where to write catalog.yaml.")] = Path(),
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing catalog.")] = False,
) -> None:
    """Write a starter catalog.yaml to DIR."""
    from importlib.resources import files

    make_directory(directory)
    target = directory / "catalog.yaml"
    if target.exists() and not force:
        raise fail(f"{target} already exists (use --force to overwrite)")
    if target.is_dir():
        raise fail(f"{target} is a directory", 2)
    try:
        target.write_text(files("runlane.catalog").joinpath("starter.yaml").read_text())
    except OSError as exc:
        raise fail(f"cannot write {target}: {exc.strerror or exc}") from None
    out.print(f"wrote {escape(str(target))}")
    # The commands find catalog.yaml in the current directory: from elsewhere, go there first.
    here = directory.resolve() == Path.cwd().resolve()
    cd = "" if here else f"cd {shlex.quote(str(directory))} && "
    out.print(f"next: {escape(cd)}runlane catalog check && runlane db upgrade && runlane serve")


def plural(count: int, noun: str) -> str:
    """`1 job`, `2 jobs`, `0 chains`."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


@one_line_errors
def catalog_check(
    path: Annotated[
        str | None,
        typer.Argument(
            metavar="PATH", help="Catalog file (the same as --catalog; env RUNLANE_CATALOG)."
        ),
    ] = None,
    catalog: CatalogOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Validate the catalog; report every error as FILE:LINE:COL: message."""
    from runlane.catalog import load_catalog
    from runlane.errors import CatalogError

    if path is not None and catalog is not None:
        raise InvalidArgument(
            f"the catalog is given twice ({path!r} and --catalog {catalog!r}): give one"
        )
    path = path or catalog or Settings.from_env().catalog_path
    try:
        cat = load_catalog(path)
    except CatalogError as exc:
        if as_json:
            print_json({"valid": False, "errors": exc.problems})
            raise typer.Exit(1) from None
        for problem in exc.problems:
            if problem != exc.message:  # a missing file is its own only problem: one line
                err.print(output.escape(problem))
        raise fail(exc.message) from None
    # Every schedule the scheduler will follow: the jobs' and the chains'.
    schedules = sum(len(j.schedules) for j in cat.jobs.values()) + sum(
        1 for c in cat.chains.values() if c.schedule is not None
    )
    if as_json:
        print_json(
            {
                "valid": True,
                "jobs": len(cat.jobs),
                "chains": len(cat.chains),
                "schedules": schedules,
            }
        )
    else:
        out.print(
            f"{output.escape(path)}: ok — {plural(len(cat.jobs), 'job')}, "
            f"{plural(len(cat.chains), 'chain')}, {plural(schedules, 'schedule')}"
        )


def catalog_schema() -> None:
    """Print the catalog's JSON Schema."""
    from runlane.catalog import catalog_json_schema

    print(json.dumps(catalog_json_schema(), indent=2, sort_keys=True))


@one_line_errors
def db_upgrade(database: DatabaseOpt = None) -> None:
    """Apply pending schema migrations."""
    settings = settings_from(database=database)

    async def body(rt: Runtime) -> None:
        applied = await rt.store.upgrade()
        version_now = await rt.store.schema_version()
        await rt.store.ensure_current()  # written by a newer runlane: refused, as `db status` does
        await rt.store.check_writable()  # "up to date" on a read-only database would mislead
        if applied:
            out.print(
                f"applied migrations {', '.join(map(str, applied))}; schema is at version {version_now}"
            )
        else:
            out.print(f"schema is up to date (version {version_now})")

    async def go() -> None:
        async with open_runtime(settings, catalog=False, check_schema=False, create=True) as rt:
            await body(rt)

    run_async(go())


@one_line_errors
def db_status(database: DatabaseOpt = None) -> None:
    """Show the schema version and whether it is current."""
    settings = settings_from(database=database)

    async def go() -> None:
        async with open_runtime(settings, catalog=False, check_schema=False) as rt:
            current = await rt.store.schema_version()
            try:
                await rt.store.ensure_current()
                out.print(f"schema version {current}: current")
            except RunlaneError as exc:
                raise fail(exc.message) from None

    run_async(go())


@one_line_errors
def config(
    catalog: CatalogOpt = None, database: DatabaseOpt = None, as_json: JsonOpt = False
) -> None:
    """Print the effective configuration (secrets masked)."""
    from runlane.service.config import ENV_NAMES

    data = settings_from(catalog, database).public()
    if as_json:
        print_json(data)
        return
    if data.get("log_level") is None:
        data["log_level"] = "default (info for serve, warning otherwise)"
    for key, value in data.items():  # lists and mappings (the http_* settings) as their env text
        if isinstance(value, list):
            data[key] = ",".join(value)
        elif isinstance(value, dict):
            data[key] = ",".join(f"{k}={v}" for k, v in value.items())
    rows = [(f"{k} ({ENV_NAMES[k]})" if k in ENV_NAMES else k, v) for k, v in data.items()]
    out.print(output.kv_table(rows))


def make_directory(directory: Path) -> None:
    """Create `directory` (and its parents) for the files a command writes, or fail in one line:
    exit 2 when it names a file, 1 when the system refuses."""
    if directory.exists() and not directory.is_dir():
        raise fail(f"{directory} is not a directory (give the directory to write into)", 2)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise fail(
            f"{directory} is not a directory (give the directory to write into)", 2
        ) from None
    except OSError as exc:
        raise fail(f"cannot create directory {directory}: {exc.strerror or exc}") from None


# ---------------------------------------------------------------------- the launcher


HttpAddrOpt = Annotated[
    str | None,
    typer.Option(
        "--http-addr",
        metavar="ADDR",
        help="Serve HTTP on HOST:PORT ([::1]:8080; :8080 = every interface; off) "
        "(env RUNLANE_HTTP_ADDR, default 127.0.0.1:8080).",
    ),
]


def flag_http_addr(text: str) -> tuple[str, int] | None:
    """`--http-addr`'s value, read as RUNLANE_HTTP_ADDR is; a bad one is a bad flag (exit 2,
    `invalid_argument`, the flag named), not a bad configuration (exit 1)."""
    from runlane.errors import ConfigError
    from runlane.service.config import parse_http_addr

    try:
        return parse_http_addr(text, name="--http-addr")
    except ConfigError as exc:
        raise InvalidArgument(exc.message) from None


def http_settings(
    catalog: str | None, database: str | None, http_addr: str | None
) -> tuple[Settings, tuple[str, int] | None]:
    """The settings, with `--http-addr` over RUNLANE_HTTP_ADDR, and where to listen (None: off)."""
    if http_addr is not None:
        flag_http_addr(http_addr)
    settings = Settings.from_env(catalog_path=catalog, database_url=database, http_addr=http_addr)
    return settings, settings.http_listen


@one_line_errors
def serve(
    catalog: CatalogOpt = None,
    database: DatabaseOpt = None,
    http_addr: HttpAddrOpt = None,
    no_http: Annotated[
        bool, typer.Option("--no-http", help="Run the launcher only (as RUNLANE_HTTP_ADDR=off).")
    ] = False,
) -> None:
    """Run the launcher, and the HTTP API beside it, until SIGTERM or SIGINT."""
    configure_logging("info")
    settings, listen = http_settings(catalog, database, http_addr)
    if no_http:
        listen = None
    from runlane.service.runtime import event_loop_factory

    loop_factory = event_loop_factory(settings.event_loop)
    if listen is None and not (settings.metrics_enabled and settings.metrics_listen is not None):
        # The launcher alone: the HTTP stack (FastAPI, the web UI, MCP; ~0.6 s of imports and
        # ~40 MiB) is never loaded into a launcher that serves nothing.
        from runlane.service.metrics import LauncherMetrics
        from runlane.service.runtime import serve as serve_launcher

        run_async(serve_launcher(settings, freeze_gc=True, metrics=LauncherMetrics()), loop_factory)
        return
    from runlane.api.server import serve_with_http

    run_async(serve_with_http(settings, listen), loop_factory)


@one_line_errors
def web(
    catalog: CatalogOpt = None, database: DatabaseOpt = None, http_addr: HttpAddrOpt = None
) -> None:
    """Serve the HTTP API without a launcher until SIGTERM or SIGINT (run several behind a
    Service: it keeps no state of its own)."""
    from runlane.api.server import serve_web

    configure_logging("info")
    settings, listen = http_settings(catalog, database, http_addr)
    if listen is None:
        raise fail(f"runlane web needs an address, not {settings.http_addr!r} (--http-addr)", 2)
    run_async(serve_web(settings, listen))
