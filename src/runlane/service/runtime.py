"""What the faces use: open the store and the catalog from settings, and the operations on runs.

Faces (CLI, API, MCP) call these functions; none of them talks SQL or picks an adapter.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from runlane.core.durations import parse_duration
from runlane.core.runs import AcceptResult, Run, RunStatus
from runlane.errors import (
    CatalogError,
    ConfigError,
    DatabaseUnavailable,
    NotFound,
    RunlaneError,
    RunRefused,
)
from runlane.ports import Executor, Override, RunFilter, Store
from runlane.service.accept import RunRequest, accept_run, prepare_run
from runlane.service.config import DEFAULT_LOG_DIR, Settings
from runlane.service.stores import store_from_url

if TYPE_CHECKING:
    from runlane.catalog import Catalog
    from runlane.service.launcher import LauncherHook

log = structlog.get_logger("runlane.runtime")


def _load_catalog(path: str) -> Catalog:
    # Imported here: the models cost ~0.2 s, which commands without a catalog should not pay.
    from runlane.catalog.loader import load_catalog

    return load_catalog(path)


@dataclass
class Runtime:
    """An open store plus (optionally) the loaded catalog."""

    settings: Settings
    store: Store
    catalog: Catalog | None

    def require_catalog(self) -> Catalog:
        if self.catalog is None:
            self.catalog = _load_catalog(self.settings.catalog_path)
        return self.catalog

    async def accept(self, request: RunRequest) -> AcceptResult:
        refuse_pods(self.require_catalog(), request.job)
        return await accept_run(
            self.store,
            self.require_catalog(),
            request,
            available_executors=available_executors(),
            pod_fallback=self.settings.pod_fallback,
        )

    def check_accept(self, request: RunRequest) -> None:
        """Raise what `accept` would refuse `request` with, writing nothing."""
        refuse_pods(self.require_catalog(), request.job)
        prepare_run(
            self.require_catalog(),
            request,
            available_executors=available_executors(),
            pod_fallback=self.settings.pod_fallback,
        )

    async def find_log(self, run: Run) -> Path:
        """Where `run`'s log file is, for `runlane logs` and `run --wait`: where this process's
        RUNLANE_LOG_DIR puts it (relative to the current directory, as the default is) when a
        file is there, which costs one look; else, for an inline run that has been claimed, in
        the log directory its launcher's heartbeat reports (`launcher_log_dirs`): a launcher
        started in another directory writes under its own. The local path when neither has it
        (the caller shows the saved tail, or says there is no output)."""
        name = f"{run.id}.{run.attempt}.log"
        local = Path(self.settings.log_dir) / name
        # A queued run is not writing a log: waiting for its start looks up no heartbeats.
        if local.is_file() or run.executor != "inline" or run.status is RunStatus.QUEUED:
            return local
        for directory in await self.launcher_log_dirs(run):
            found = Path(directory) / name
            if found.is_file():
                return found
        return local

    async def launcher_log_dirs(self, run: Run) -> list[str]:
        """The log directories (from heartbeats) where `run`'s inline log may be: that of the
        launcher that claimed it (its lease owner, kept after the run ends) when its heartbeat
        is there and on this host; else those of the live launchers on this host. A directory
        on another host names another machine's files; a stopped launcher has no heartbeat."""
        # Imported here: with it come the catalog models (~85 ms), which a file found here
        # does not need.
        from runlane.service.catalog_stamp import live_launchers, on_this_host

        launchers = await self.store.launchers()
        owner = next((h for h in launchers if h.launcher_id == run.lease_owner), None)
        if owner is not None and on_this_host(owner):
            candidates = [owner]
        else:
            live = live_launchers(
                launchers, await self.store.now(), self.settings.launcher_stale_after
            )
            candidates = [h for h in live if on_this_host(h)]
        return [h.log_dir for h in candidates if h.log_dir is not None]

    async def resolve_run_id(self, prefix: str) -> Run:
        """A run by id, or by a unique prefix of at least 6 characters (as git does)."""
        try:
            return await self.store.get_run(prefix)
        except NotFound:
            if len(prefix) < 6:
                raise
        matches = [
            r for r in await self.store.list_runs(RunFilter(limit=500)) if r.id.startswith(prefix)
        ]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise NotFound(f"run id prefix {prefix!r} is ambiguous ({len(matches)} runs)")
        raise NotFound(f"no run with id {prefix!r}")

    async def pause(
        self, job: str, *, until: str | None, reason: str | None, by: str | None
    ) -> Override:
        self.require_catalog().resolve(job)
        paused_until = None
        if until:
            paused_until = parse_until(until, await self.store.now())
        return await self.store.set_override(job, paused_until=paused_until, reason=reason, by=by)

    async def next_attempt(self, run: Run) -> Run | None:
        if (
            run.status not in (RunStatus.FAILURE, RunStatus.TIMEOUT)
            or run.attempt >= run.max_attempts
        ):
            return None
        for other in await self.store.list_runs(RunFilter(job=run.job, limit=200)):
            if other.retry_of == run.id:
                return other
        return None


async def pod_log_lines(
    rt: Runtime, run: Run, *, follow: bool, on_wait: Callable[[str], None] | None = None
) -> AsyncIterator[str]:
    """A pod run's log from the cluster (`runlane logs`): whole, or followed line by line until
    its container ends. `NotFound` when there is no pod to read (without `follow`).

    `follow` waits for the pod to exist and its container to start (bounded backoff; `on_wait`
    is told once what it waits for) as long as the run is not final. A run that ends before its
    pod ran yields its saved log tail, and `on_wait` gets how it ended."""
    from runlane.adapters.kubernetes.logs import pod_log

    namespace = None
    with contextlib.suppress(RunlaneError):
        spec = rt.require_catalog().resolve(run.job).profile_spec
        namespace = spec.namespace if spec is not None else None
    last = run

    async def active() -> bool:
        nonlocal last
        last = await rt.store.get_run(run.id)
        return not last.status.is_final

    streamed = False
    async for chunk in pod_log(
        run.job, run.id, run.attempt, namespace, follow=follow, active=active, on_wait=on_wait
    ):
        streamed = True
        yield chunk
    if follow and not streamed and last.status.is_final:
        for line in (last.log_tail or "").splitlines():
            yield line
        if on_wait is not None:
            reason = f" ({last.error_code})" if last.error_code else ""
            note = f": {last.note}" if last.note else ""
            on_wait(
                f"run {last.id} ended {last.status.value}{reason} while waiting for its pod{note}"
            )


def refuse_pods(catalog: Catalog, job: str) -> None:
    """Refuse a pod job when the cluster named explicitly cannot be used (a `KUBECONFIG` that
    names no readable file): it must not quietly run inline on this host."""
    from runlane.adapters.kubernetes.config import cluster_problem

    problem = cluster_problem()
    if problem is not None and catalog.resolve(job).executor == "pod":
        raise RunRefused(f"job {job!r} runs as a Kubernetes pod, but {problem}")


def available_executors() -> tuple[str, ...]:
    """The executors this launcher can use now: `pod` only when a cluster is configured (in a
    cluster, or a kubeconfig via `KUBECONFIG` / `~/.kube/config`). Slurm joins in its issue."""
    from runlane.adapters.kubernetes.config import cluster_configured

    if cluster_configured():
        return ("inline", "pod")
    return ("inline",)


def parse_until(text: str, now: datetime) -> datetime:
    """`--until` as a duration from now (`2h`) or an ISO-8601 time (`2026-12-01T08:00Z`)."""
    with contextlib.suppress(ValueError):
        return now + timedelta(seconds=parse_duration(text))
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ConfigError(
            f"--until {text!r}: expected a duration such as 2h or an ISO time such as "
            "2026-12-01T08:00Z"
        ) from exc
    if at.tzinfo is None:
        at = at.astimezone()
    return at


@contextlib.asynccontextmanager
async def open_runtime(
    settings: Settings,
    *,
    catalog: bool = True,
    check_schema: bool = True,
    application_name: str = "runlane",
    create: bool = False,
    bounded: bool = False,
) -> AsyncIterator[Runtime]:
    """The store (opened) and the catalog. `create=True` only for what sets a database up
    (`runlane db upgrade`, the demo): otherwise a SQLite file that is not there is an error
    ("no database at PATH"), not a new empty database. `bounded=True` (the launcher): every
    database call is bounded by `settings.db_timeout`."""
    store = store_from_url(
        settings.database_url,
        application_name=application_name,
        create=create,
        db_timeout=settings.db_timeout if bounded else None,
    )
    cat = _load_catalog(settings.catalog_path) if catalog else None
    await store.open()
    try:
        if check_schema:
            await store.ensure_current()
        yield Runtime(settings=settings, store=store, catalog=cat)
    finally:
        await store.close()


def prepare_log_dir(log_dir: str) -> None:
    """Make the log directory of inline runs and check that a file can be written in it, so a
    launcher that could keep no log refuses to start in one line (ConfigError) that names the
    directory, the setting it comes from and the reason, not later for every run."""
    import tempfile

    path = Path(log_dir).absolute()
    source = (
        f"RUNLANE_LOG_DIR (default {DEFAULT_LOG_DIR})"
        if log_dir == DEFAULT_LOG_DIR
        else f"RUNLANE_LOG_DIR={log_dir!r}"
    )
    directory = "the log directory" + ("" if Path(log_dir).is_absolute() else f" {path}")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        why = _why_not_a_directory(path, exc)
        raise ConfigError(f"{source}: cannot create {directory}: {why}") from None
    try:
        with tempfile.TemporaryFile(dir=path, prefix=".runlane-probe-"):
            pass
    except OSError as exc:
        raise ConfigError(f"{source}: cannot write in {directory}: {exc.strerror or exc}") from None


def _why_not_a_directory(path: Path, exc: OSError) -> str:
    """Why `path` could not be made a directory: which part of it is a file, when one is (the OS
    says only "Not a directory" or "File exists"), else what the OS says."""
    for part in (path, *path.parents):
        if part.exists() or part.is_symlink():
            if not part.is_dir():
                return f"{part} is not a directory"
            break
    return exc.strerror or str(exc)


def build_executors(
    settings: Settings, *, start_timeout: float | None = None
) -> dict[str, Executor]:
    """The launcher's executors. `pod` joins when a cluster is configured; its start timeout is
    the catalog's `global.start_timeout` (read from `settings.catalog_path` when not given)."""
    from runlane.adapters.kubernetes.config import cluster_configured, cluster_problem
    from runlane.adapters.local import executor as inline
    from runlane.adapters.local.executor import InlineExecutor

    inline.SPAWN_THREADS = settings.spawn_threads
    prepare_log_dir(settings.log_dir)
    executors: dict[str, Executor] = {"inline": InlineExecutor(settings.log_dir)}
    if cluster_configured() or cluster_problem() is not None:
        # A broken KUBECONFIG still gets the pod executor: its runs fail (config_error, naming
        # the path) or wait, never run inline here.
        from runlane.adapters.kubernetes.executor import PodExecutor

        if start_timeout is None:
            start_timeout = 600.0
            with contextlib.suppress(CatalogError, OSError):
                start_timeout = _load_catalog(settings.catalog_path).global_.start_timeout
        executors["pod"] = PodExecutor(start_timeout=start_timeout)
    return executors


async def probe_writable(store: Store) -> None:
    """Refuse to start a launcher on a database it cannot write (a read-only SQLite file, a
    read-only PostgreSQL transaction or standby): it would fail every claim forever. A database
    that is unreachable right now is not refused here: the launcher rides out outages."""
    try:
        await store.check_writable()
    except DatabaseUnavailable as exc:
        log.warning("launcher.database_unavailable", error=str(exc))


async def serve(
    settings: Settings,
    *,
    hook: LauncherHook | None = None,
    stop: asyncio.Event | None = None,
    install_signals: bool = True,
    freeze_gc: bool = False,
) -> None:
    """`runlane serve`: run the launcher until SIGTERM/SIGINT (or `stop` is set).

    `freeze_gc` (the `runlane serve` process): once started, everything allocated so far (the
    imported modules, the catalog, the connections: ~68,000 objects) is moved out of the cyclic
    garbage collector's sight, so its collections under load look only at what runs allocate
    (bench/throughput.py: ~11 of 33 ms of collections per 2,000 runs saved)."""
    async with open_runtime(
        settings, application_name=f"runlane-launcher:{settings.launcher_id}", bounded=True
    ) as rt:
        await probe_writable(rt.store)
        from runlane.service.launcher import Launcher  # only `serve` needs it (~45 ms to import)

        catalog = rt.require_catalog()
        launcher = Launcher(
            store=rt.store,
            catalog=catalog,
            executors=build_executors(settings, start_timeout=catalog.global_.start_timeout),
            settings=settings,
            hook=hook,
            executor_caps={"pod": catalog.global_.max_concurrent_pods},
            retry_base_seconds=settings.retry_base,
        )
        loop = asyncio.get_running_loop()
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, launcher.stop)
        watcher = None
        if stop is not None:

            async def _watch() -> None:
                await stop.wait()
                launcher.stop()

            watcher = asyncio.create_task(_watch())
        if freeze_gc:
            gc.collect()
            gc.freeze()
        try:
            await launcher.run()
        finally:
            if watcher is not None:
                watcher.cancel()
            if install_signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
