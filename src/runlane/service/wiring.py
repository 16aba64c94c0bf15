"""The composition root: the one module of the service layer that imports adapters.

It picks the run-log store for a database URL (`sqlite:///…` or `postgresql://…`), builds the
launcher's executors (inline; pod when a cluster is configured) and prepares their log
directory, and reaches the Kubernetes adapter for what the faces ask of it (is a cluster usable,
a pod's log, the RBAC review). Adapters are imported inside the functions that use them: the
PostgreSQL driver and the Kubernetes client cost every `runlane` command start-up time.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from runlane.core.secrets import mask_secrets, mask_url
from runlane.errors import CatalogError, ConfigError, RunRefused
from runlane.ports import BrokerBus, Bus, Clock, Executor, Notifier, Store, Wakeups
from runlane.service.config import DEFAULT_LOG_DIR, Settings

if TYPE_CHECKING:
    from runlane.adapters.kubernetes.rbac import Permission
    from runlane.catalog import Catalog

ACCEPTED_FORMS = (
    "sqlite:///relative/path.db, sqlite:////absolute/path.db, a path ending in .db or .sqlite, "
    "or postgresql://user:password@host:port/dbname"
)


def sqlite_path(url: str) -> str | None:
    """The file path a SQLite URL or bare path names, or None when it is not a SQLite URL."""
    if url.startswith("sqlite:///"):
        # sqlite:///rel.db → "rel.db"; sqlite:////abs.db → "/abs.db" (the SQLAlchemy convention).
        path = url[len("sqlite:///") :]
        return path or None
    if "://" not in url and url.endswith((".db", ".sqlite", ".sqlite3")):
        return url
    return None


def absolute_url(url: str) -> str:
    """`url` with a relative SQLite path made absolute (against the working directory now), so
    a process that runs elsewhere (a run that changes directory) names the same file."""
    path = sqlite_path(url.strip())
    if path is None or path == ":memory:" or path.startswith("file:") or os.path.isabs(path):  # noqa: PTH117
        return url
    return "sqlite:///" + os.path.abspath(path)  # noqa: PTH100


def check_postgres_url(url: str) -> None:
    """`ConfigError` (secrets masked, one line) unless libpq can parse the connection string.
    Whatever libpq takes is accepted: several hosts, any port text (the connection reports it)."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        conninfo_to_dict(url)
    except psycopg.Error as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        reason = mask_secrets(reason.replace(url, mask_url(url)), url)
        raise ConfigError(f"invalid database URL {mask_url(url)!r}: {reason}") from None


def store_from_url(
    url: str,
    *,
    clock: Clock | None = None,
    application_name: str = "runlane",
    create: bool = True,
    db_timeout: float | None = None,
    outbox: bool = False,
) -> Store:
    """A (not yet opened) store for `url`; `ConfigError` naming the accepted forms otherwise.

    `create=False`: a SQLite file that does not exist is not created; opening the store fails
    with "no database at PATH" instead (every command but `runlane db upgrade`).

    `outbox=True` (`RUNLANE_BUS=rabbitmq`): every queued row writes an outbox row too, in the
    same transaction, for the relay to publish.

    `db_timeout` (the launcher's RUNLANE_DB_TIMEOUT): on PostgreSQL, the bound on each call,
    past which it fails as `DatabaseUnavailable`; SQLite, a local file, needs none."""
    url = url.strip()
    path = sqlite_path(url)
    if path is not None:
        from runlane.adapters.sqlite import SqliteStore

        return SqliteStore(path, clock=clock, create=create, outbox=outbox)
    if url.startswith(("postgresql://", "postgres://")):
        from runlane.adapters.postgres import PostgresStore

        check_postgres_url(url)
        return PostgresStore(
            url,
            clock=clock,
            application_name=application_name,
            timeout=db_timeout,
            outbox=outbox,
        )
    raise ConfigError(f"unsupported database URL {mask_url(url)!r}: use {ACCEPTED_FORMS}")


def prepare_log_dir(log_dir: str) -> None:
    """Make the log directory of inline runs and check that a file can be written in it, so a
    launcher that could keep no log refuses to start in one line (ConfigError) that names the
    directory, the setting it comes from and the reason, not later for every run."""
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
    from runlane.adapters.kubernetes.config import (
        cluster_configured,
        cluster_problem,
        job_ttl_seconds,
    )
    from runlane.adapters.local import executor as inline
    from runlane.adapters.local.executor import InlineExecutor

    inline.SPAWN_THREADS = settings.spawn_threads
    prepare_log_dir(settings.log_dir)
    from runlane.service.config import INLINE_SPAWN_MODES

    executors: dict[str, Executor] = {
        "inline": InlineExecutor(
            settings.log_dir,
            spawn_off_loop=INLINE_SPAWN_MODES[settings.inline_spawn],
            # None (auto): spawner processes where they can run, unless a mode was named
            spawn_process=True if settings.inline_spawn == "process" else None,
            spawners=settings.spawners,
        )
    }
    if cluster_configured() or cluster_problem() is not None:
        # A broken KUBECONFIG still gets the pod executor: its runs fail (config_error, naming
        # the path) or wait, never run inline here.
        from runlane.adapters.kubernetes.executor import PodExecutor

        start_timeout = _start_timeout(settings, start_timeout)
        executors["pod"] = PodExecutor(start_timeout=start_timeout, ttl_seconds=job_ttl_seconds())
    if slurm_configured():
        from runlane.adapters.slurm.config import poll_interval
        from runlane.adapters.slurm.executor import SlurmExecutor

        # Job output goes to the launcher's log directory, as inline runs' does: it must be on
        # a file system the compute nodes share (docs/slurm.md).
        executors["slurm"] = SlurmExecutor(
            settings.log_dir,
            start_timeout=_start_timeout(settings, start_timeout),
            poll_interval=poll_interval(),
        )
    return executors


def _start_timeout(settings: Settings, given: float | None) -> float:
    """The catalog's `global.start_timeout` (read from `settings.catalog_path`) unless given."""
    if given is not None:
        return given
    from runlane.catalog.loader import load_catalog

    with contextlib.suppress(CatalogError, OSError):
        return load_catalog(settings.catalog_path).global_.start_timeout
    return 600.0


def slurm_configured() -> bool:
    """Whether a Slurm cluster is configured here (sbatch and a client configuration)."""
    from runlane.adapters.slurm.config import slurm_configured as configured

    return configured()


async def slurm_report(
    partitions: list[str],
) -> list[tuple[Literal["ok", "warning", "error"], str]]:
    """`runlane doctor`'s Slurm checks as (level, message) (see `adapters.slurm.doctor`)."""
    from runlane.adapters.slurm.doctor import slurm_report as report

    return await report(partitions)


def cluster_configured() -> bool:
    """Whether a Kubernetes cluster is configured (in a cluster, or a kubeconfig)."""
    from runlane.adapters.kubernetes import config

    return config.cluster_configured()


def cluster_problem() -> str | None:
    """Why the cluster named explicitly cannot be used (a `KUBECONFIG` naming no readable
    file), or None."""
    from runlane.adapters.kubernetes import config

    return config.cluster_problem()


def available_executors() -> tuple[str, ...]:
    """The executors this launcher can use now: `pod` only when a cluster is configured (in a
    cluster, or a kubeconfig via `KUBECONFIG` / `~/.kube/config`); `slurm` only when sbatch and
    a Slurm client configuration are here (`SLURM_CONF`, /etc/slurm/slurm.conf, RUNLANE_SLURM)."""
    found = ["inline"]
    if cluster_configured():
        found.append("pod")
    if slurm_configured():
        found.append("slurm")
    return tuple(found)


def refuse_pods(catalog: Catalog, job: str) -> None:
    """Refuse a pod job when the cluster named explicitly cannot be used (a `KUBECONFIG` that
    names no readable file): it must not quietly run inline on this host."""
    problem = cluster_problem()
    if problem is not None and catalog.resolve(job).executor == "pod":
        raise RunRefused(f"job {job!r} runs as a Kubernetes pod, but {problem}")


def pod_log(
    job: str,
    run_id: str,
    attempt: int,
    namespace: str | None,
    *,
    follow: bool,
    active: Callable[[], Awaitable[bool]],
    on_wait: Callable[[str], None] | None,
) -> AsyncIterator[str]:
    """A pod run's log from the cluster (see `adapters.kubernetes.logs.pod_log`)."""
    from runlane.adapters.kubernetes import logs

    return logs.pod_log(
        job, run_id, attempt, namespace, follow=follow, active=active, on_wait=on_wait
    )


async def rbac_review(namespace: str | None) -> list[tuple[Permission, bool | None]]:
    """The pod executor's permissions in `namespace`, each allowed, denied or unknown (None)."""
    from runlane.adapters.kubernetes import rbac

    return await rbac.rbac_review(namespace)


def rbac_lacks(label: str) -> str:
    """What pod runs lack without the optional permission `label` ("" when nothing)."""
    from runlane.adapters.kubernetes.rbac import WITHOUT

    return WITHOUT.get(label, "")


def build_bus(
    store: Wakeups, settings: Settings | None = None, catalog: Catalog | None = None
) -> Bus:
    """The run log's transport for a launcher: the database itself (its wake-ups are the
    store's LISTEN/NOTIFY or in-process signal), or with `RUNLANE_BUS=rabbitmq` RabbitMQ fed by
    the outbox (not yet connected: `open` it), its event queue bound to the catalog's keys."""
    if settings is not None and settings.bus == "rabbitmq":
        return build_broker_bus(store, settings, catalog)
    from runlane.adapters.sql.bus import DatabaseBus

    return DatabaseBus(store)


def build_broker_bus(
    store: Wakeups | None, settings: Settings, catalog: Catalog | None = None, *, prefix: str = ""
) -> BrokerBus:
    """The RabbitMQ bus at `RUNLANE_RABBITMQ_URL` (docs/bus.md); `prefix` namespaces its queues
    (tests, benchmarks)."""
    from runlane.adapters.rabbitmq import RabbitBus, Topology

    keys = () if catalog is None else event_keys(catalog)
    return RabbitBus(
        settings.rabbitmq_url,
        store,
        topology=Topology(prefix=prefix, event_keys=keys),
        prefetch=settings.concurrency,
        connection_name=f"runlane {settings.launcher_id}",
        management_url=settings.rabbitmq_management_url,
    )


def event_keys(catalog: Catalog) -> tuple[str, ...]:
    """Every key the catalog's `on_event` entries listen to, sorted, once each."""
    return tuple(sorted({t.key for job in catalog.jobs.values() for t in job.on_event}))


def build_notifier(
    kind: str,
    name: str,
    url: str,
    *,
    token: str | None = None,
    secret: str | None = None,
    body_format: str | None = None,
    external_url: str | None = None,
) -> Notifier:
    """The notifier of one `alerts.notify` target (`kind` ntfy or webhook), URL and secrets
    already expanded (service/alerts/targets.py)."""
    from runlane.adapters.notify import NtfyNotifier, WebhookNotifier  # httpx: on use only

    if kind == "ntfy":
        return NtfyNotifier(name, url, token=token)
    return WebhookNotifier(
        name,
        url,
        secret=secret,
        body_format="alertmanager" if body_format == "alertmanager" else "runlane",
        external_url=external_url,
    )


def build_pinger(name: str) -> HttpPinger:
    """A bounded HTTP client for the dead man's switch (`HttpPinger.request`, `aclose`)."""
    from runlane.adapters.notify import HttpNotifier

    return HttpNotifier(name)


class HttpPinger(Protocol):
    """What the alert loop's dead man's switch calls (`adapters.notify.HttpNotifier`)."""

    async def request(self, method: str, url: str, *, within: float) -> None: ...

    async def aclose(self) -> None: ...
