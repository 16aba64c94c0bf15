"""Shared set-up for the benchmarks: scratch databases, a catalog of `true` jobs, /proc readings."""

from __future__ import annotations

import os
import sqlite3
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

# The launchers the benches start serve no HTTP (several run at once in some benches), except
# where a bench says so (http_overhead.py compares the two).
os.environ.setdefault("RUNLANE_HTTP_ADDR", "off")

PG_URL = os.environ.get("RUNLANE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
# Put before every scratch database's name (several engineers sharing one server keep theirs
# apart): tests/support/postgres.py reads it too.
DB_PREFIX = os.environ.get("RUNLANE_TEST_DB_PREFIX", "")

CATALOG = """
version: 1
global: {max_deadline: 1h, manual_queue_ttl: 1h, kill_grace: 1s}
defaults: {executor: inline, overlap: allow, max_attempts: 1, deadline: 5m}
jobs:
  noop:
    command: ["true"]
"""


@contextmanager
def scratch_database(kind: str, workdir: Path) -> Iterator[str]:
    """A fresh database URL of `kind` (sqlite | postgres), removed afterwards."""
    if kind == "sqlite":
        yield f"sqlite:///{workdir / f'bench-{uuid.uuid4().hex[:6]}.db'}"
        return
    name = f"{DB_PREFIX}runlane_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{PG_URL.rsplit('/', 1)[0]}/{name}"
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def wait_for_successes(
    url: str, n: int, *, timeout: float = 600.0, job: str | None = None
) -> float:
    """Wait until `n` runs are `success`; return the seconds from the first start to the last
    finish (database timestamps)."""
    first, last = wait_for_span(url, n, timeout=timeout, job=job)
    return last - first


def wait_for_span(
    url: str, n: int, *, timeout: float = 600.0, job: str | None = None
) -> tuple[float, float]:
    """Wait until `n` runs are `success`; return the first start and the last finish as Unix
    times (database timestamps). Polls a count on one connection every 0.25 s: listing the runs
    instead would cost the database and this process more than the launcher being measured."""
    # With `job`, only that job's runs (a bench that seeded history times its own runs only).
    mark = "?" if url.startswith("sqlite:") else "%s"
    where = "status = 'success'" + ("" if job is None else f" AND job = {mark}")
    count = f"SELECT count(*) FROM run_log WHERE {where}"
    span_sql = f"SELECT min(started_at), max(finished_at) FROM run_log WHERE {where}"
    args: tuple[str, ...] = () if job is None else (job,)
    started = time.monotonic()
    if url.startswith("sqlite:"):
        conn: Any = closing(sqlite3.connect(url.split(":///", 1)[1], timeout=30))
    else:
        conn = psycopg.connect(url, autocommit=True)
    with conn as db:
        while (db.execute(count, args).fetchone() or (0,))[0] < n:
            if time.monotonic() - started > timeout:
                raise SystemExit(f"fewer than {n} runs finished in {timeout:g} s")
            time.sleep(0.25)
        first, last = db.execute(span_sql, args).fetchone()
    if isinstance(first, str):  # SQLite's text, stored as UTC (naive text is UTC too)
        first, last = (datetime.fromisoformat(t).replace(tzinfo=UTC) for t in (first, last))
    return first.timestamp(), last.timestamp()


class MachineLoad:
    """Samples the machine's CPU time (/proc/stat: busy and idle, all CPUs) every `every`
    seconds in a thread, so that how idle the machine was over a window known only afterwards
    (a run log's first start to last finish) can be read: a queue that leaves cores idle while
    runs wait is slower than its CPU per run says."""

    def __init__(self, every: float = 0.01) -> None:
        self._every = every
        # (Unix time, monotonic time, busy s, idle s)
        self._samples: list[tuple[float, float, float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> MachineLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        ticks = os.sysconf("SC_CLK_TCK")
        fd = os.open("/proc/stat", os.O_RDONLY)
        try:
            while True:
                # (read afresh each time: a buffered file's seek(0) would keep the old text)
                f = [int(x) for x in os.pread(fd, 256, 0).split(b"\n", 1)[0].split()[1:9]]
                # user nice system idle iowait irq softirq steal
                busy, idle = f[0] + f[1] + f[2] + f[5] + f[6] + f[7], f[3] + f[4]
                now = (time.time(), time.monotonic())
                self._samples.append((*now, busy / ticks, idle / ticks))
                if self._stop.wait(self._every):
                    return
        finally:
            os.close(fd)

    def idle_pct(self, start: float, end: float, *, monotonic: bool = False) -> float:
        """Percent of all CPUs' time idle from `start` to `end` (Unix times, or the monotonic
        clock's), between the samples just inside the window (NaN when it holds fewer than
        two)."""
        clock = 1 if monotonic else 0
        inside = [s for s in self._samples if start <= s[clock] <= end]
        if len(inside) < 2:
            return float("nan")
        (_, _, b0, i0), (_, _, b1, i1) = inside[0], inside[-1]
        total = (b1 - b0) + (i1 - i0)
        return 100 * (i1 - i0) / total if total > 0 else float("nan")


_FAR_FUTURE = "9999-12-31T00:00:00+00:00"


@contextmanager
def held_queue(url: str) -> Iterator[Callable[[], None]]:
    """Keep every queued run from being claimed until the yielded `release()` is called.

    Lets a benchmark start its launcher on a full queue and read the launcher's CPU once it is
    idle, instead of subtracting a start-up figure read from another process (which varied by
    0.3 s between launchers, ±0.15 ms per run over 2,000 runs). On PostgreSQL the rows are only
    locked (claims skip locked rows), so nothing about them changes: rewriting them would leave
    dead index entries and skew the planner's statistics, which a real backlog does not have.
    SQLite has no row locks: there the runs are set not due until released."""
    if url.startswith("sqlite:"):
        path = url.split(":///", 1)[1]
        sql = "UPDATE run_log SET not_before = ? WHERE status = 'queued'"
        with closing(sqlite3.connect(path, timeout=30)) as db, db:
            db.execute(sql, (_FAR_FUTURE,))

        def release_sqlite() -> None:
            with closing(sqlite3.connect(path, timeout=30)) as db, db:
                db.execute(sql, (None,))

        yield release_sqlite
        return
    with psycopg.connect(url) as conn:
        conn.execute("SELECT id FROM run_log WHERE status = 'queued' FOR UPDATE").fetchall()
        # On the RabbitMQ bus the relay's work is part of a run's cost: its outbox rows are
        # held too (the relay skips locked rows), so it does not publish during start-up.
        conn.execute("SELECT id FROM outbox WHERE published_at IS NULL FOR UPDATE").fetchall()

        def release_postgres() -> None:
            conn.rollback()
            conn.execute("SELECT pg_notify('runlane_wakeup', '')")
            conn.commit()

        yield release_postgres


def _stat_seconds(pid: int, first: int) -> float:
    """Two adjacent clock-tick fields of /proc/<pid>/stat (counted after the command's name),
    summed, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[first]) + int(fields[first + 1])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (its children excluded)."""
    return _stat_seconds(pid, 11)


def children_cpu_seconds(pid: int) -> float:
    """cutime + cstime of one process: its reaped children's CPU (and theirs)."""
    return _stat_seconds(pid, 13)


# Server processes that work for every database (a commit's WAL flush, checkpoints).
_PG_SHARED = ("walwriter", "checkpointer", "background writer")


def postgres_cpu_seconds(database: str | None = None) -> dict[int, float]:
    """CPU seconds by pid of the postgres processes on this machine; with `database`, only its
    backends (and autovacuum workers) and the shared WAL writer, checkpointer and background
    writer: other people's sessions on the same server are not ours to count."""
    found: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() not in ("postgres", "postmaster"):
                continue
            if database is not None:
                title = (
                    (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                )
                if f" {database} " not in f"{title} " and not any(p in title for p in _PG_SHARED):
                    continue
            found[int(entry.name)] = cpu_seconds(int(entry.name))
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return found


def postgres_cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU used between two `postgres_cpu_seconds` readings: processes that exited in between
    are not counted, those started in between count in full."""
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())


def rabbitmq_cpu_seconds() -> float | None:
    """utime + stime of the RabbitMQ server on this machine (its Erlang VM, beam.smp: all of
    it, whoever it works for); None when no such process runs here."""
    total, found = 0.0, False
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() == "beam.smp":
                total += cpu_seconds(int(entry.name))
                found = True
        except OSError:
            continue
    return total if found else None


def helper_pids(pid: int) -> list[int]:
    """The launcher's own helper processes (the inline executor's guardian or its spawners)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue  # gone meanwhile
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid and (
            b"guardian" in cmdline or b"spawner.py" in cmdline
        ):
            found.append(int(proc.name))
    return found


def helper_cpu_seconds(pid: int) -> float:
    """CPU of the launcher's own helper processes (the inline executor's guardian or its
    spawner): part of the launcher's cost, though not in its own utime + stime. Runs are not
    counted (the spawner's reaped runs are in its cutime, not here)."""
    return sum(cpu_seconds(helper) for helper in helper_pids(pid))


def runs_cpu_seconds(pid: int) -> float:
    """CPU of the runs themselves: the reaped children of the launcher (runs it spawned on its
    own threads) and of its helpers (the spawners' runs), cutime + cstime."""
    return sum(children_cpu_seconds(p) for p in (pid, *helper_pids(pid)))


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def median(values: list[float]) -> float:
    return statistics.median(values)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def runlane_cmd() -> list[str]:
    return [sys.executable, "-m", "runlane"]
