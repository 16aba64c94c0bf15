"""The `runlane` command: a thin face over the service layer.

Every command reads its settings from flags, then the environment (`RUNLANE_*`), then defaults.
Errors a person can cause print one line on stderr and exit non-zero; never a traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Coroutine
from functools import wraps
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar

import structlog
import typer

from runlane import __version__
from runlane.cli import output
from runlane.cli.inputs import (
    BadInput,
    check_limit,
    invalid_utf8_argument,
    parse_until,
    run_id_prefix,
)
from runlane.cli.logline import LineRenderer
from runlane.cli.output import err, out, print_json, run_dict
from runlane.core.runs import Run, RunStatus, Trigger
from runlane.errors import ConfigError, NotFound, OverlapRefused, RunlaneError
from runlane.ports import RunFilter
from runlane.service.accept import RunRequest
from runlane.service.config import Settings
from runlane.service.runtime import Runtime, open_runtime

P = ParamSpec("P")
T = TypeVar("T")

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    help="runlane: a durable job launcher. One catalog, one run log, every trigger through one door.",
)
catalog_app = typer.Typer(no_args_is_help=True, help="Check the catalog and print its schema.")
db_app = typer.Typer(no_args_is_help=True, help="Database schema: show the version, upgrade.")
app.add_typer(catalog_app, name="catalog")
app.add_typer(db_app, name="db")

CatalogOpt = Annotated[
    str | None, typer.Option("--catalog", "-c", help="Catalog file (env RUNLANE_CATALOG).")
]
DatabaseOpt = Annotated[
    str | None,
    typer.Option("--database", "-d", help="Database URL (env RUNLANE_DATABASE_URL)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON and nothing else.")]


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever `sys.stderr` is when a record comes: tests and embedding programs
    swap it, and a handler bound to a closed stream would only print logging errors."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def configure_logging(default_level: str = "warning") -> None:
    from runlane.service.config import env_log_format, env_log_level

    try:
        level_name = env_log_level(os.environ) or default_level
        log_format = env_log_format(os.environ)
    except ConfigError:  # reported in one line by the command, as it reads its settings
        level_name, log_format = default_level, "console"
    level = logging.getLevelNamesMapping()[level_name.upper()]
    # Tracebacks in logs never show local variables: they hold database URLs with passwords,
    # lease tokens and params (structlog's rich formatter shows them by default).
    renderer: Any
    processors: list[Any] = [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if log_format == "json":
        processors.append(structlog.processors.format_exc_info)
        renderer = structlog.processors.JSONRenderer()
    elif sys.stderr.isatty():
        renderer = structlog.dev.ConsoleRenderer(
            colors=True, exception_formatter=structlog.dev.plain_traceback
        )
    else:
        # The same layout for a pipe or a file (a launcher under systemd or Kubernetes), at a
        # fraction of the cost: a line per run is logged on the launcher's busy thread.
        processors.append(structlog.processors.format_exc_info)
        renderer = LineRenderer()
    structlog.configure(
        processors=[*processors, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    # The libraries' own records (psycopg's pool retrying during an outage, asyncio, httpx) in
    # the same format, so a JSON log stays all JSON; warnings and up only, whatever the level:
    # at info the pool logs every connection it hands back.
    handler = _StderrHandler()
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *processors],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    handler.set_name("runlane")
    root = logging.getLogger()
    root.handlers = [h for h in root.handlers if h.get_name() != "runlane"] + [handler]
    root.setLevel(max(level, logging.WARNING))


def settings_from(catalog: str | None = None, database: str | None = None) -> Settings:
    return Settings.from_env(catalog_path=catalog, database_url=database)


def fail(message: str, code: int = 1) -> typer.Exit:
    err.print(f"[red]error:[/] {output.escape(message)}")
    return typer.Exit(code)


def error_object(exc: RunlaneError) -> dict[str, Any]:
    """What a refusal prints on stdout under `--json` (besides its line on stderr)."""
    data: dict[str, Any] = {"error": exc.code, "message": exc.message}
    if isinstance(exc, OverlapRefused):
        data["active_run_id"] = exc.active_run_id
    problems = getattr(exc, "problems", None)
    if problems:
        data["problems"] = list(problems)
    return data


def friendly(fn: Callable[P, T]) -> Callable[P, T]:
    """Turn runlane's errors into one plain line on stderr and the error's exit code. Under
    `--json` the error is also printed on stdout as `{"error": CODE, "message": TEXT, ...}`.

    An OSError from a file operation becomes `error: PATH: <reason>` (exit 1)."""

    @wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return fn(*args, **kwargs)
        except RunlaneError as exc:
            if kwargs.get("as_json"):
                print_json(error_object(exc))
            problems = getattr(exc, "problems", None) or []
            for problem in problems:
                if problem != exc.message:  # a missing file is its own only problem
                    err.print(output.escape(problem))
            raise fail(exc.message, exc.exit_code) from None
        except OSError as exc:
            if exc.filename is None:
                raise
            message = f"{exc.filename}: {exc.strerror or exc}"
            if kwargs.get("as_json"):
                print_json({"error": "os_error", "message": message})
            raise fail(message, 1) from None
        except KeyboardInterrupt:
            raise typer.Exit(130) from None

    return wrapper


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def with_runtime(
    settings: Settings, body: Callable[[Runtime], Awaitable[T]], *, catalog: bool = True
) -> T:
    async def go() -> T:
        async with open_runtime(settings, catalog=catalog) as rt:
            return await body(rt)

    return run_async(go())


# ---------------------------------------------------------------------- setup commands


@app.command()
def version() -> None:
    """Print the runlane version."""
    typer.echo(__version__)


@app.command()
@friendly
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
    out.print(f"wrote {target}")
    out.print("next: runlane catalog check && runlane db upgrade && runlane serve")


def plural(count: int, noun: str) -> str:
    """`1 job`, `2 jobs`, `0 chains`."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


@catalog_app.command("check")
@friendly
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
        raise BadInput(f"the catalog is given twice ({path!r} and --catalog {catalog!r}): give one")
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


@catalog_app.command("schema")
def catalog_schema() -> None:
    """Print the catalog's JSON Schema."""
    from runlane.catalog import catalog_json_schema

    print(json.dumps(catalog_json_schema(), indent=2, sort_keys=True))


@db_app.command("upgrade")
@friendly
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


@db_app.command("status")
@friendly
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


@app.command()
@friendly
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


@app.command()
@friendly
def serve(catalog: CatalogOpt = None, database: DatabaseOpt = None) -> None:
    """Run the launcher until SIGTERM or SIGINT."""
    from runlane.service.runtime import serve as serve_launcher

    configure_logging("info")
    settings = settings_from(catalog, database)
    run_async(serve_launcher(settings, freeze_gc=True))


@app.command()
@friendly
def demo(
    keep: Annotated[bool, typer.Option("--keep", help="Keep the demo's directory.")] = False,
) -> None:
    """A guided tour on a throwaway SQLite database (a few seconds; nothing else needed)."""
    from runlane.cli.demo import run_demo

    raise typer.Exit(run_demo(keep=keep))


# ---------------------------------------------------------------------- runs


def parse_params(pairs: list[str]) -> dict[str, str]:
    params: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise BadInput(f"-p {pair!r}: expected NAME=VALUE")
        if name in params:
            raise BadInput(f"-p {name}: given twice")
        params[name] = value
    return params


@app.command("run")
@friendly
def run_cmd(
    job: Annotated[str, typer.Argument(help="The job to run.")],
    param: Annotated[
        list[str] | None, typer.Option("--param", "-p", help="NAME=VALUE, repeatable.")
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Follow the run to its end.")] = False,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Confirm a job with acts: true.")
    ] = False,
    as_json: JsonOpt = False,
    catalog: CatalogOpt = None,
    database: DatabaseOpt = None,
) -> None:
    """Queue a run of JOB (exit 2: bad params, 3: overlap refused)."""
    settings = settings_from(catalog, database)
    params = parse_params(param or [])
    requested_by = os.environ.get("USER") or os.environ.get("LOGNAME") or "cli"

    async def body(rt: Runtime) -> int:
        result = await rt.accept(
            RunRequest(
                job=job,
                trigger=Trigger.CLI,
                params=params,
                params_from_strings=True,
                requested_by=requested_by,
                confirmed=yes,
            )
        )
        run = result.run
        if not wait:
            if as_json:
                print_json(run_dict(run))
            else:
                out.print(f"queued {run.job} as run {run.id}")
                if run.note:
                    out.print(f"note: {output.escape(run.note)}")
            # Queued all the same (exit 0), but said: nothing will start it yet.
            await warn_if_no_launcher(rt)
            await warn_if_no_launcher_knows(rt, run)
            return 0
        if not as_json:
            out.print(f"queued {run.job} as run {run.id}; waiting for it to finish")
        await warn_if_no_launcher(rt)
        await warn_if_no_launcher_knows(rt, run)
        final = await follow_with_output(rt, run.id, show_output=not as_json)
        if as_json:
            print_json(run_dict(final))
        else:
            out.print(
                f"run {final.id} (attempt {final.attempt}) ended {output.status_text(final.status.value)}"
                + (f" ({output.escape(final.end_reason)})" if final.end_reason else "")
                # Why it ended so, when the run's output cannot say (a command not found), or
                # what its output lacks, successful or not (a log file cut short).
                + (f": {output.escape(output.terminal_safe(final.note))}" if final.note else "")
            )
        return 0 if final.status is RunStatus.SUCCESS else 1

    code = with_runtime(settings, body)
    raise typer.Exit(code)


async def warn_if_no_launcher(rt: Runtime) -> None:
    """One line on stderr when no launcher has beaten lately (each judged by its own heartbeat
    interval): nothing will start a queued run."""
    from runlane.service.catalog_stamp import live_launchers

    live = live_launchers(
        await rt.store.launchers(), await rt.store.now(), rt.settings.launcher_stale_after
    )
    if not live:
        err.print("[yellow]warning:[/] no launcher is running; start one with `runlane serve`")


async def warn_if_no_launcher_knows(rt: Runtime, run: Run) -> None:
    """One line on stderr when live launchers run and the catalog of every one lacks the run's
    job (loaded before the job was added, or another file: heartbeats do not say which): the
    run waits (kept for repair) until a launcher on a catalog with the job runs."""
    from runlane.service.catalog_stamp import (
        catalog_digest,
        live_launchers,
        nobody_knows,
        nobody_knows_message,
    )

    if run.status is not RunStatus.QUEUED:
        return
    live = live_launchers(
        await rt.store.launchers(), await rt.store.now(), rt.settings.launcher_stale_after
    )
    if not nobody_knows(run.job, live):
        return
    file_digest = catalog_digest(rt.catalog) if rt.catalog is not None else None
    message = nobody_knows_message(run.job, live, rt.settings.catalog_path, file_digest)
    err.print(
        f"[yellow]warning:[/] {output.escape(output.terminal_safe(message))}; run {run.id} waits "
        "until `runlane serve` is restarted on a catalog that has the job"
    )


async def warn_if_launchers_are_behind(rt: Runtime, chain: str) -> None:
    """One line on stderr when live launchers run and none of them has `chain` (see
    `catalog_stamp.chain_warning`)."""
    from runlane.service.catalog_stamp import catalog_digest, chain_warning, live_launchers

    live = live_launchers(
        await rt.store.launchers(), await rt.store.now(), rt.settings.launcher_stale_after
    )
    message = chain_warning(
        chain, live, catalog_digest(rt.require_catalog()), rt.settings.catalog_path
    )
    if message is not None:
        err.print(f"[yellow]warning:[/] {output.escape(output.terminal_safe(message))}")


def repair_notice(run: Run, catalog_path: str, *, in_file: bool | None, known_live: bool) -> str:
    """What `run --wait` and `logs --follow` say, once, when a launcher keeps the run they
    follow for repair: what happened and what to do. They keep waiting.

    For `unknown_job`: `in_file` tells whether the catalog file defines the job (None: not
    read), `known_live` whether a live launcher has it now (restarted since)."""
    from runlane.service.catalog_stamp import at_seconds

    next_try = f" ({at_seconds(run.not_before)})" if run.not_before else ""
    if run.error_code == "unknown_job":
        if in_file is False:
            return (
                f"run {run.id} is kept for repair: job {run.job!r} is not in {catalog_path} "
                f"either; cancel it (`runlane cancel {run.id}`) or add the job back"
            )
        if known_live:
            return (
                f"run {run.id} went back to the queue: the launcher that claimed it did not know "
                f"job {run.job!r}; a launcher running now has the job and starts the run at its "
                f"next try{next_try}"
            )
        if in_file is None:
            return (
                f"run {run.id} waits: the launcher that claimed it does not know job "
                f"{run.job!r} and keeps the run for repair; if the job was added to the catalog "
                f"since, restart `runlane serve`: the restarted launcher starts the run at once"
            )
        return (
            f"run {run.id} waits for a restart: the launcher that claimed it loaded {catalog_path} "
            f"before job {run.job!r} was added and keeps the run for repair; restart `runlane "
            f"serve`: the restarted launcher starts the run at once"
        )
    if run.error_code == "corrupt_params":
        return (
            f"run {run.id} is kept for repair: its stored params are not valid JSON, so no "
            f"launcher will start it; cancel it (`runlane cancel {run.id}`) and queue a new one"
        )
    return (
        f"run {run.id} is kept for repair ({run.error_code}: {run.note or 'no note'}); see "
        f"`runlane doctor`; next try{next_try or ' later'}"
    )


async def say_repair(rt: Runtime, run: Run) -> None:
    """One warning line on stderr: why the followed run waits (see `repair_notice`)."""
    from runlane.service.catalog_stamp import live_launchers

    in_file = None if rt.catalog is None else run.job in rt.catalog.jobs
    live = live_launchers(
        await rt.store.launchers(), await rt.store.now(), rt.settings.launcher_stale_after
    )
    known_live = any(h.catalog_jobs is not None and run.job in h.catalog_jobs for h in live)
    notice = repair_notice(run, rt.settings.catalog_path, in_file=in_file, known_live=known_live)
    err.print(f"[yellow]warning:[/] {output.escape(output.terminal_safe(notice))}")


def write_output(text: str, *, raw: bool = False) -> None:
    """A job's output on stdout: as it is when piped or with --raw, with its control characters
    shown as escapes on a terminal (a job must not be able to clear or retitle the reader's)."""
    sys.stdout.write(text if raw or not sys.stdout.isatty() else output.terminal_safe(text))


def finish_incomplete_log(
    run: Run, log_path: Path, *, size: int | None, line_open: bool, raw: bool
) -> bool:
    """After the log file's text (`size` bytes printed; None when there was no file to read):
    when the run's note says the file is incomplete (a full disk, its directory gone), one
    marker line on stderr, then the tail saved with the run, whole, on stdout. The printed text
    may stop mid-line (`line_open`): the line is ended first, so the tail starts on its own.
    False, printing nothing, when the note says no such thing."""
    error = output.incomplete_log_error(run.note, log_path.name)
    if error is None:
        return False
    if line_open:
        sys.stdout.write("\n")
    sys.stdout.flush()  # the file's text before the marker, on a terminal showing both
    marker = output.incomplete_log_marker(size, error, tail=bool(run.log_tail))
    err.print(output.terminal_safe(marker), markup=False, emoji=False)
    if run.log_tail:
        write_output(run.log_tail, raw=raw)
        sys.stdout.flush()
    return True


async def follow_with_output(
    rt: Runtime, run_id: str, *, show_output: bool, raw: bool = False
) -> Any:
    """Follow a run (and its retries) to the end, printing its output as it is written. A
    launcher keeping the run for repair is said once on stderr (`repair_notice`)."""
    from runlane.service.doctor import REPAIR_CODES

    run = await rt.store.get_run(run_id)
    printed: dict[str, int] = {}  # bytes of each log file printed
    line_open: dict[str, bool] = {}  # whether what was printed of it stops mid-line
    told: set[str] = set()  # runs whose repair was said: once, not on every poll
    found: dict[str, Path] = {}  # each run's log file once found: not looked for again

    async def log_file(of: Run) -> Path:
        if of.id not in found:
            path = await rt.find_log(of)
            if not path.is_file():
                return path
            found[of.id] = path
        return found[of.id]

    while True:
        if run.status is RunStatus.QUEUED and run.error_code in REPAIR_CODES and run.id not in told:
            told.add(run.id)
            await say_repair(rt, run)
        path = await log_file(run) if show_output else None
        if path is not None and path.is_file():  # not whatever took its place (a directory)
            with path.open("rb") as fh:
                fh.seek(printed.get(str(path), 0))
                chunk = fh.read()
                if chunk:
                    printed[str(path)] = printed.get(str(path), 0) + len(chunk)
                    line_open[str(path)] = not chunk.endswith(b"\n")
                    write_output(chunk.decode("utf-8", "replace"), raw=raw)
                    sys.stdout.flush()
        if run.status.is_final:
            told_tail = False
            if path is not None:  # the file is whole once the run has ended: printed to its end
                told_tail = finish_incomplete_log(
                    run,
                    path,
                    size=printed.get(str(path), 0) if path.is_file() else None,
                    line_open=line_open.get(str(path), False),
                    raw=raw,
                )
            nxt = await rt.next_attempt(run)
            if nxt is None:
                unprinted = path is not None and str(path) not in printed
                if unprinted and not told_tail and run.log_tail:
                    write_output(run.log_tail, raw=raw)
                return run
            if show_output:
                out.print(
                    f"attempt {run.attempt} ended {run.status.value}; retrying as attempt {nxt.attempt}"
                )
            run = nxt
            continue
        await asyncio.sleep(0.2)
        run = await rt.store.get_run(run.id)


@app.command("runs")
@friendly
def runs_cmd(
    run_id: Annotated[
        str | None,
        typer.Argument(metavar="ID", help="Show one run (the same as `runs show ID`)."),
    ] = None,
    job: Annotated[str | None, typer.Option("--job", help="Only this job.")] = None,
    status: Annotated[str | None, typer.Option("--status", help="Only this status.")] = None,
    limit: Annotated[
        int | None,
        typer.Option("--limit", "-n", help="At most N runs, 1 to 10000 [default: 20]."),
    ] = None,
    as_json: JsonOpt = False,
    database: DatabaseOpt = None,
) -> None:
    """List runs, newest first; `runlane runs ID` (or `runs show ID`) shows one."""
    if run_id is not None:
        if run_id == "show":  # `runs --json show`: the word, without the id after it
            raise BadInput("`runs show` needs a run id: runlane runs show ID")
        filters = (("--job", job), ("--status", status), ("--limit", limit))
        given = [flag for flag, value in filters if value is not None]
        if given:
            them, verb = ("them", "filter") if len(given) > 1 else ("it", "filters")
            raise BadInput(
                f"{', '.join(given)} {verb} the list of runs; leave {them} out to show run "
                f"{run_id!r}"
            )
        show_run(run_id, as_json, database)
        return
    settings = settings_from(database=database)
    if limit is not None:
        check_limit(limit)
    st = None
    if status is not None:
        try:
            st = RunStatus(status)
        except ValueError:
            raise BadInput(
                f"--status {status!r}: expected one of {', '.join(s.value for s in RunStatus)}"
            ) from None

    async def body(rt: Runtime) -> None:
        runs = await rt.store.list_runs(RunFilter(job=job, status=st, limit=limit or 20))
        if as_json:
            print_json([run_dict(r) for r in runs])
        elif not runs:
            out.print("no runs")
        else:
            out.print(output.runs_table(runs))

    with_runtime(settings, body, catalog=False)


async def resolve_run(rt: Runtime, run_id: str) -> Run:
    """A run by its id or a unique prefix of it (any case; at least 6 characters). A refusal
    quotes the id as it was typed, not as it was looked up (lowercased)."""
    prefix = run_id_prefix(run_id)
    try:
        return await rt.resolve_run_id(prefix)
    except NotFound as exc:
        raise NotFound(exc.message.replace(repr(prefix), repr(run_id.strip()))) from None


@app.command("show", hidden=True)
@friendly
def show_alias(
    run_id: Annotated[
        str, typer.Argument(metavar="ID", help="A run id or a unique prefix of 6+ characters.")
    ],
    as_json: JsonOpt = False,
    database: DatabaseOpt = None,
) -> None:
    """Show one run: every column and its log tail (`runlane runs show ID`)."""
    show_run(run_id, as_json, database)


def show_run(run_id: str, as_json: bool, database: str | None) -> None:
    settings = settings_from(database=database)

    async def body(rt: Runtime) -> None:
        run = await resolve_run(rt, run_id)
        if as_json:
            print_json(run_dict(run))
            return
        data = run_dict(run)
        tail = data.pop("log_tail", None)
        data["params"] = (
            json.dumps(run.params) if run.params is not None else f"(corrupt) {run.params_raw}"
        )
        out.print(output.kv_table(data.items()))
        if tail:
            out.print("[bold]log tail[/]")
            tail = output.terminal_safe(tail)  # a view for people, piped or not
            sys.stdout.write(tail if tail.endswith("\n") else tail + "\n")

    with_runtime(settings, body, catalog=False)


@app.command("logs")
@friendly
def logs_cmd(
    run_id: str,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until the run ends.")
    ] = False,
    raw: Annotated[
        bool,
        typer.Option("--raw", help="Print control characters as they are, even on a terminal."),
    ] = False,
    database: DatabaseOpt = None,
) -> None:
    """Print a run's output (the per-run log file, or the saved tail). On a terminal, control
    characters (escape sequences) are shown as escapes unless --raw; piped, output is as is."""
    settings = settings_from(database=database)

    async def body(rt: Runtime) -> None:
        run = await resolve_run(rt, run_id)
        if follow and run.status is RunStatus.QUEUED:
            await warn_if_no_launcher(rt)  # else it waits in silence for a run nothing starts
        if run.executor == "pod" and not (run.status.is_final and run.log_tail):
            # The pod's log, from the cluster; the saved tail once the run has ended.
            from runlane.service.runtime import pod_log_lines

            try:
                async for chunk in pod_log_lines(
                    rt, run, follow=follow, on_wait=lambda m: err.print(m, markup=False)
                ):
                    write_output(chunk + "\n" if follow else chunk, raw=raw)
                    sys.stdout.flush()
                return
            except NotFound as exc:
                if not run.log_tail:
                    raise fail(exc.message) from None
        if follow:
            await follow_with_output(rt, run.id, show_output=True, raw=raw)
            return
        path = await rt.find_log(run)
        if path.is_file():  # not whatever took its place (a directory: no file was written)
            data = path.read_bytes()
            if raw or not sys.stdout.isatty():
                sys.stdout.flush()
                sys.stdout.buffer.write(data)  # byte for byte, for tools
            else:
                write_output(data.decode("utf-8", "replace"))
            line_open = bool(data) and not data.endswith(b"\n")
            finish_incomplete_log(run, path, size=len(data), line_open=line_open, raw=raw)
        elif finish_incomplete_log(run, path, size=None, line_open=False, raw=raw):
            pass  # no file to read, which the note explains: the marker, then the saved tail
        elif run.log_tail:
            write_output(run.log_tail, raw=raw)
        elif not run.status.is_final:
            err.print(f"run {run.id} has no output yet ({run.status.value})")
        else:
            # Nothing was written (it never started, or printed nothing): say how it ended.
            why = f": {output.terminal_safe(run.note)}" if run.note else ""
            reason = f" ({run.end_reason})" if run.end_reason else ""
            err.print(
                f"run {run.id} has no output; it ended {run.status.value}{reason}{why}",
                markup=False,
            )

    with_runtime(settings, body, catalog=False)


@app.command("cancel")
@friendly
def cancel_cmd(run_id: str, as_json: JsonOpt = False, database: DatabaseOpt = None) -> None:
    """Cancel a queued or running run, or a running chain run (with its unfinished steps)."""
    settings = settings_from(database=database)
    who = os.environ.get("USER") or "cli"

    async def body(rt: Runtime) -> None:
        try:
            run = await resolve_run(rt, run_id)
        except NotFound:
            # Not a run: a chain run's id (one whose chain left the catalog can be ended only so).
            if await cancel_chain(rt, run_id, who, as_json):
                return
            raise
        run = await rt.store.request_cancel(run.id, by=who)
        if as_json:
            print_json(run_dict(run))
        elif run.status is RunStatus.CANCELLED:
            out.print(f"cancelled run {run.id}")
        else:
            out.print(f"asked the launcher to cancel run {run.id} ({run.status.value})")

    with_runtime(settings, body, catalog=False)


async def cancel_chain(rt: Runtime, text: str, who: str, as_json: bool) -> bool:
    """`runlane cancel` of a chain run id (or a unique prefix): end it `cancelled` and cancel its
    unfinished steps. False when no chain run has that id either."""
    from runlane.cli.triggers import chain_run_dict, find_chain_run
    from runlane.service.chains import cancel_chain_run

    try:
        found = await find_chain_run(rt, text)
    except NotFound:
        return False
    chain_run, steps = await cancel_chain_run(rt.store, found.id, by=who)
    if as_json:
        print_json({**chain_run_dict(chain_run), "cancelled_steps": [run_dict(r) for r in steps]})
        return True
    out.print(f"cancelled chain run {chain_run.id} ({output.escape(chain_run.chain)})")
    for step in steps:
        verb = "cancelled" if step.status is RunStatus.CANCELLED else "asked the launcher to cancel"
        out.print(f"  {verb} run {step.id} ({output.escape(step.job)}, {step.status.value})")
    return True


@app.command("pause")
@friendly
def pause_cmd(
    job: str,
    until: Annotated[
        str | None, typer.Option("--until", help="A duration (2h) or an ISO time.")
    ] = None,
    reason: Annotated[
        str | None, typer.Option("--reason", help="Why, for the people who look.")
    ] = None,
    catalog: CatalogOpt = None,
    database: DatabaseOpt = None,
) -> None:
    """Pause (or snooze, with --until) a job's scheduled and event runs."""
    settings = settings_from(catalog, database)
    who = os.environ.get("USER") or "cli"

    async def body(rt: Runtime) -> None:
        rt.require_catalog().resolve(job)
        paused_until = None if until is None else parse_until(until, await rt.store.now())
        ov = await rt.store.set_override(job, paused_until=paused_until, reason=reason, by=who)
        when = f" until {output.iso(ov.paused_until)}" if ov.paused_until else " until resumed"
        out.print(f"paused {job}{when}")

    with_runtime(settings, body)


@app.command("resume")
@friendly
def resume_cmd(job: str, catalog: CatalogOpt = None, database: DatabaseOpt = None) -> None:
    """Resume a paused job."""
    settings = settings_from(catalog, database)

    async def body(rt: Runtime) -> None:
        rt.require_catalog().resolve(job)
        if await rt.store.clear_override(job):
            out.print(f"resumed {job}")
        else:
            out.print(f"{job} was not paused")

    with_runtime(settings, body)


@app.command("jobs")
@friendly
def jobs_cmd(
    as_json: JsonOpt = False, catalog: CatalogOpt = None, database: DatabaseOpt = None
) -> None:
    """List the catalog's jobs with their settings and pause state."""
    settings = settings_from(catalog, database)

    async def body(rt: Runtime) -> None:
        from runlane.service.scheduler import pause_of

        cat = rt.require_catalog()
        overrides = await rt.store.overrides()
        now = await rt.store.now()
        rows: list[dict[str, Any]] = []
        for name in cat.job_names():
            j = cat.resolve(name)
            ov = overrides.get(name)
            if pause_of(ov, now) is None:  # not paused, or a snooze that has ended
                ov = None
            rows.append(
                {
                    "job": name,
                    "executor": j.executor,
                    "overlap": j.overlap,
                    "max_attempts": j.max_attempts,
                    "deadline_seconds": j.deadline_seconds,
                    "acts": j.acts,
                    "params": {k: str(v) for k, v in j.params.items()},
                    "schedules": [s.cron for s in j.schedules],
                    "paused": ov is not None,
                    "paused_until": output.iso(ov.paused_until) if ov else None,
                    "pause_reason": ov.reason if ov else None,
                    "paused_by": ov.created_by if ov else None,
                    "description": j.description,
                }
            )
        if as_json:
            print_json(rows)
            return
        from rich.table import Table

        table = Table(header_style="bold")
        for col in (
            "job",
            "executor",
            "overlap",
            "tries",
            "deadline",
            "schedules",
            "params",
            "state",
        ):
            # Names and settings stay on one line; only schedules, params and state wrap.
            table.add_column(col, no_wrap=col not in ("schedules", "params", "state"))
        from runlane.core.durations import format_duration

        for r in rows:
            table.add_row(
                output.escape(r["job"]),
                r["executor"],
                r["overlap"],
                str(r["max_attempts"]),
                format_duration(r["deadline_seconds"]),
                output.escape(", ".join(r["schedules"])) or "-",
                output.escape(", ".join(f"{k}: {v}" for k, v in r["params"].items())) or "-",
                _pause_state(r),
            )
        out.print(table)

    with_runtime(settings, body)


def _pause_state(row: dict[str, Any]) -> str:
    """`active`, or `paused until …: reason`, for the jobs table (the reason is anybody's text)."""
    if not row["paused"]:
        return "active"
    state = "paused" + (f" until {row['paused_until']}" if row["paused_until"] else "")
    if row["pause_reason"]:
        state += f": {output.terminal_safe(row['pause_reason'])}"
    return output.escape(state)


@app.command("status")
@friendly
def status_cmd(
    as_json: JsonOpt = False, catalog: CatalogOpt = None, database: DatabaseOpt = None
) -> None:
    """Launchers (and whether each runs the catalog file as it is now), queue depth, anything
    stuck."""
    settings = settings_from(catalog, database)

    async def body(rt: Runtime) -> None:
        from runlane.core.durations import format_duration
        from runlane.service.catalog_stamp import (
            catalog_state,
            changed_message,
            short_digest,
            stale_bound,
        )
        from runlane.service.doctor import stuck_runs

        file_digest, file_error = catalog_file_digest(settings.catalog_path)
        launchers = await rt.store.launchers()
        now = await rt.store.now()
        queued = await rt.store.count_queued()
        # Live from the run log, by launcher: a heartbeat's counts are as old as its beat.
        running = await rt.store.running_by_launcher()
        stuck = await stuck_runs(rt.store)
        data: dict[str, Any] = {
            "now": output.iso(now),
            "queued": queued,
            "running": sum(sum(by_executor.values()) for by_executor in running.values()),
            "stuck": [
                {"id": s.run_id, "job": s.job, "status": s.status, "why": s.why} for s in stuck
            ],
            "catalog": {
                "path": settings.catalog_path,
                "catalog_digest": file_digest,
                "error": file_error,
            },
            "launchers": [],
        }
        changed: list[str] = []
        for h in launchers:
            seen = None if h.beat_at is None else max(0.0, (now - h.beat_at).total_seconds())
            stale = seen is None or seen > stale_bound(h, settings.launcher_stale_after)
            state = catalog_state(h, file_digest)
            if state == "changed" and not stale:
                changed.append(changed_message(h, settings.catalog_path))
            data["launchers"].append(
                {
                    "launcher_id": h.launcher_id,
                    "host": h.host,
                    "pid": h.pid,
                    "version": h.version,
                    "started_at": output.iso(h.started_at),
                    "beat_at": output.iso(h.beat_at),
                    "last_seen_seconds": None if seen is None else round(seen, 3),
                    "stale": stale,
                    # A stale launcher's last counts are history, not the present: not shown.
                    "queue_depth": None if stale else h.queue_depth,
                    "running": None if stale else running.get(h.launcher_id, {}),
                    "catalog_digest": h.catalog_digest,
                    "catalog_loaded_at": output.iso(h.catalog_loaded_at),
                    "catalog_jobs": None if h.catalog_jobs is None else list(h.catalog_jobs),
                    "catalog_path": h.catalog_path,
                    "heartbeat_interval": h.heartbeat_interval,
                    "catalog_chains": None if h.catalog_chains is None else list(h.catalog_chains),
                    "log_dir": h.log_dir,
                    # True: runs the file as it is now; False: the file changed since it loaded
                    # it; null: cannot tell (the file does not load, or no digest reported).
                    "catalog_current": None if state == "unknown" else state == "current",
                }
            )
        if as_json:
            print_json(data)
            return
        out.print(f"queued: {queued}   running: {data['running']}")
        if not launchers:
            out.print("[yellow]no launcher has reported; start one with `runlane serve`[/]")
        for entry in data["launchers"]:
            name = f"launcher {output.escape(entry['launcher_id'])} v{entry['version']}"
            seen = entry["last_seen_seconds"]
            ago = "never" if seen is None else f"{format_duration(seen)} ago ({entry['beat_at']})"
            if entry["stale"]:
                out.print(f"{name} [red]stale[/]: last seen {ago}")
            else:
                out.print(
                    f"{name} beat {ago} running {entry['running']} "
                    f"catalog {short_digest(entry['catalog_digest'])}"
                )
        for message in changed:
            out.print(f"[yellow]warning:[/] {output.escape(output.terminal_safe(message))}")
        if file_error is not None and any(e["catalog_digest"] for e in data["launchers"]):
            out.print(
                f"[yellow]note:[/] {output.escape(file_error)}: the launchers' catalogs are "
                "not compared with it"
            )
        for s in stuck:
            out.print(
                f"[yellow]stuck[/] run {s.run_id} ({output.escape(s.job)}, {s.status}): "
                f"{output.escape(s.why)}"
            )

    with_runtime(settings, body, catalog=False)


def catalog_file_digest(path: str) -> tuple[str | None, str | None]:
    """The digest of the catalog file as it is now, or None and the one line saying why it
    cannot be read (status reports the launchers all the same)."""
    from runlane.catalog import load_catalog
    from runlane.errors import CatalogError
    from runlane.service.catalog_stamp import catalog_digest

    try:
        return catalog_digest(load_catalog(path)), None
    except CatalogError as exc:
        return None, exc.message


@app.command("doctor")
@friendly
def doctor_cmd(
    as_json: JsonOpt = False, catalog: CatalogOpt = None, database: DatabaseOpt = None
) -> None:
    """Check the schema, catalog, launchers and runs that need repair (exit 1 on any error)."""
    from runlane.service.doctor import diagnose

    settings = settings_from(catalog, database)

    async def body(rt: Runtime) -> int:
        findings = await diagnose(settings, rt.store)
        if as_json:
            print_json(
                [
                    {"level": f.level, "check": f.check, "message": f.message, "run_id": f.run_id}
                    for f in findings
                ]
            )
        else:
            style = {"ok": "green", "warning": "yellow", "error": "red"}
            for f in findings:
                out.print(
                    f"[{style[f.level]}]{f.level:7}[/] {f.check:10} "
                    f"{output.escape(output.terminal_safe(f.message))}"
                )
        return 1 if any(f.level == "error" for f in findings) else 0

    async def go() -> int:
        async with open_runtime(settings, catalog=False, check_schema=False) as rt:
            return await body(rt)

    raise typer.Exit(run_async(go()))


def main() -> None:
    configure_logging()
    # `runlane runs show ID` → the show command (typer has no default subcommand with options).
    argv = sys.argv[1:]
    bad = invalid_utf8_argument(argv)
    if bad is not None:
        if "--json" in argv:
            print_json({"error": BadInput.code, "message": bad})
        err.print(f"[red]error:[/] {output.escape(bad)}")
        raise SystemExit(2)
    prog_name = None
    if len(argv) >= 2 and argv[0] == "runs" and argv[1] == "show":
        sys.argv = [sys.argv[0], "show", *argv[2:]]
        prog_name = "runlane runs"  # usage and help name `runlane runs show`, not the alias
    try:
        app(prog_name=prog_name)
    except ConfigError as exc:  # raised while reading settings, before a command's handler
        err.print(f"[red]error:[/] {output.escape(exc.message)}")
        raise SystemExit(2) from None
    except NotFound as exc:
        err.print(f"[red]error:[/] {output.escape(exc.message)}")
        raise SystemExit(1) from None


def _register_extensions() -> None:
    """Command groups that live in their own modules."""
    from runlane.cli import triggers

    triggers.register(app)


_register_extensions()
