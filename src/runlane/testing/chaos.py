"""Chaos harness: several real launchers on one PostgreSQL, killed, stalled and cut off while they
work; afterwards the run log, a ledger of executions and an audit of fenced writes are checked.

Used by the test suite (bounded) and by `bench/soak.py` (larger). What it proves:
- every dedupe key has exactly one row per attempt, and every run reached a final status within
  its limits;
- no run attempt executed twice (each job appends `run_id attempt` to a ledger file first), and
  every `success` row is in the ledger (nothing claimed done that did not run);
- no write from a stale lease was accepted: a trigger on `run_log` records every change to a
  leased row with the writing connection's `application_name` (each launcher's id), and a fenced
  write by anyone but the current lease owner is a violation.

With `amqp_url` the launchers run on the RabbitMQ bus (runs accepted through the outbox), and with
`broker_faults` the broker is stopped and started and the launchers' connections closed between
the kills and pauses; the outbox and the broker's queues are checked too
(runlane.testing.broker_faults).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import dict_row

if TYPE_CHECKING:
    from runlane.testing.broker_faults import BrokerFaults

JOB_SCRIPT = """\
import os, random, sys, time
line = f"{os.environ['RUN_ID']} {os.environ['RUNLANE_ATTEMPT']}\\n".encode()
fd = os.open(os.environ["CHAOS_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
os.write(fd, line)
os.close(fd)
mode = sys.argv[1]
rnd = random.Random()
if mode == "slow":
    time.sleep(5)
time.sleep(rnd.uniform(0.0, 0.3))
if mode == "flaky" and rnd.random() < 0.4:
    sys.exit(1)
"""

CATALOG = """\
version: 1
global: {{max_deadline: 1h, manual_queue_ttl: 10m, kill_grace: 1s}}
defaults: {{executor: inline, overlap: allow, max_attempts: 2, deadline: 30s}}
jobs:
  ok:
    command: [{py}, {script}, ok]
  flaky:
    command: [{py}, {script}, flaky]
    max_attempts: 3
  slow:
    command: [{py}, {script}, slow]
    deadline: 1s
  serial:
    command: [{py}, {script}, ok]
    overlap: queue
  tick:
    command: [{py}, {script}, ok]
    schedules: [{{cron: "{tick_cron}", tz: UTC, catch_up: 30s}}]
chains:
  pipeline:
    schedule: {{cron: "{chain_cron}", tz: UTC, catch_up: 30s}}
    steps:
      extract: {{job: ok}}
      load: {{job: flaky, after: [{{step: extract, on: success}}]}}
      report: {{job: ok, after: [{{step: load, on: finish}}]}}
"""


def chaos_window_end(start: datetime, seconds: float) -> datetime:
    """When the last slot of `chaos_crons(start, seconds)` is past: the end of its last minute."""
    last = (start + timedelta(seconds=seconds)).replace(second=0, microsecond=0)
    return last + timedelta(minutes=1)


def chaos_crons(start: datetime, seconds: float) -> tuple[str, str]:
    """Six-field crons that fire only during the chaos window: every 2 s (a job) and every 5 s
    (a chain) in the UTC minutes from `start` to `start + seconds`, so firing ends by itself
    and the run log can drain."""
    minutes: list[int] = []
    t = start.replace(second=0, microsecond=0)
    while t <= start + timedelta(seconds=seconds):
        if t.minute not in minutes:
            minutes.append(t.minute)
        t += timedelta(minutes=1)
    field_ = ",".join(str(m) for m in minutes)
    return f"*/2 {field_} * * * *", f"*/5 {field_} * * * *"


JOB_MIX = [("ok", 0.55), ("flaky", 0.3), ("slow", 0.05), ("serial", 0.1)]

AUDIT_SQL = """
CREATE TABLE IF NOT EXISTS chaos_audit (
    id bigserial PRIMARY KEY,
    run_id uuid NOT NULL,
    old_status text NOT NULL,
    new_status text NOT NULL,
    old_generation bigint NOT NULL,
    new_generation bigint NOT NULL,
    lease_owner text,
    end_reason text,
    writer text NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE OR REPLACE FUNCTION chaos_audit_fn() RETURNS trigger AS $$
BEGIN
    INSERT INTO chaos_audit (run_id, old_status, new_status, old_generation, new_generation,
                             lease_owner, end_reason, writer)
    VALUES (NEW.id, OLD.status, NEW.status, OLD.lease_generation, NEW.lease_generation,
            NEW.lease_owner, NEW.end_reason, current_setting('application_name'));
    RETURN NEW;
END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS chaos_audit ON run_log;
CREATE TRIGGER chaos_audit AFTER UPDATE ON run_log FOR EACH ROW
    WHEN (OLD.status = 'running' OR NEW.status = 'running')
    EXECUTE FUNCTION chaos_audit_fn();
"""

LAUNCHER_PREFIX = "runlane-launcher:"


@dataclass
class ChaosConfig:
    admin_url: str  # a database on the server where a scratch database can be created
    workdir: Path
    runs: int = 500
    launchers: int = 3
    duration: float = 40.0  # how long runs are produced and chaos is applied
    drain_timeout: float = 120.0
    lease_ttl: float = 2.0
    chaos_every: float = 4.0
    restart_postgres: bool = True
    seed: int = 20261129
    # Cron schedules and a scheduled chain; they fire for whole minutes, so the drain waits for
    # the end of the window's last minute (off: a shorter run).
    schedules: bool = True
    # The launchers on the RabbitMQ bus at this URL (a vhost of the run's own), runs accepted
    # through the outbox; `broker_faults` also stops/starts the broker app and closes the
    # vhost's connections (rabbitmqctl as root; the caller holds the broker exclusively).
    amqp_url: str | None = None
    broker_faults: bool = False


@dataclass
class ChaosReport:
    runs: int = 0
    first_attempts: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    kills: int = 0
    pauses: int = 0
    postgres_restarts: int = 0
    audited_writes: int = 0
    ledger_lines: int = 0
    scheduled: int = 0
    chain_runs: int = 0
    broker_stops: int = 0
    connections_closed: int = 0
    outbox_rows: int = 0
    facts_seen: int = 0  # fact deliveries on the tap, duplicates included
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> str:
        by_status = ", ".join(f"{k}={v}" for k, v in sorted(self.statuses.items()))
        return (
            f"chaos: runs={self.runs} (first attempts {self.first_attempts}; {by_status}; "
            f"scheduled {self.scheduled}; chain runs {self.chain_runs}) "
            f"kills={self.kills} pauses={self.pauses} postgres_restarts={self.postgres_restarts} "
            f"audited_writes={self.audited_writes} ledger={self.ledger_lines} "
            + (
                f"broker_stops={self.broker_stops} connections_closed={self.connections_closed} "
                f"outbox_rows={self.outbox_rows} facts_seen={self.facts_seen} "
                if self.outbox_rows
                else ""
            )
            + f"violations={len(self.violations)} in {self.seconds:.0f}s"
        )


def postgres_version_dir() -> str:
    return sorted(p.name for p in Path("/etc/postgresql").iterdir())[-1]


def handles_signal(pid: int, sig: signal.Signals) -> bool:
    """Process `pid` has a handler of its own for `sig` (the SigCgt mask in /proc)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (sig - 1)))
    return False


def restart_postgres() -> None:
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", postgres_version_dir(), "main", "restart"],
        check=True,
        capture_output=True,
        timeout=120,
    )


class Harness:
    def __init__(self, config: ChaosConfig) -> None:
        self.cfg = config
        self.rnd = random.Random(config.seed)  # noqa: S311 - a reproducible test schedule, not a secret
        self.report = ChaosReport()
        self.db_name = f"runlane_chaos_{uuid.uuid4().hex[:8]}"
        self.window_end = datetime.now(UTC)  # set by setup(): when the crons stop firing
        self.url = f"{config.admin_url.rsplit('/', 1)[0]}/{self.db_name}"
        self.ledger = config.workdir / "ledger.txt"
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.logs: list[Any] = []
        self.broker: BrokerFaults | None = None
        if config.amqp_url is not None:
            from runlane.testing.broker_faults import BrokerFaults

            self.broker = BrokerFaults(config.amqp_url)

    # ------------------------------------------------------------------ set-up

    def env(self) -> dict[str, str]:
        ttl = self.cfg.lease_ttl
        return dict(
            os.environ,
            RUNLANE_DATABASE_URL=self.url,
            RUNLANE_CATALOG=str(self.cfg.workdir / "catalog.yaml"),
            RUNLANE_LOG_DIR=str(self.cfg.workdir / "logs"),
            RUNLANE_LEASE_TTL=f"{ttl}s",
            RUNLANE_LEASE_RENEW_INTERVAL=f"{ttl / 4}s",
            RUNLANE_CLAIM_INTERVAL="200ms",
            RUNLANE_HEARTBEAT_INTERVAL="1s",
            RUNLANE_ORPHAN_CHECK_INTERVAL="2s",
            RUNLANE_SHUTDOWN_GRACE="1s",
            RUNLANE_RETRY_BASE="200ms",
            # Several launchers on one host: one HTTP address would let only the first start.
            RUNLANE_HTTP_ADDR="off",
            RUNLANE_CONCURRENCY="8",
            RUNLANE_LOG_LEVEL="warning",
            CHAOS_LEDGER=str(self.ledger),
            **(
                {"RUNLANE_BUS": "rabbitmq", "RUNLANE_RABBITMQ_URL": self.cfg.amqp_url}
                if self.cfg.amqp_url is not None
                else {}
            ),
        )

    def setup(self) -> None:
        work = self.cfg.workdir
        work.mkdir(parents=True, exist_ok=True)
        script = work / "chaos_job.py"
        script.write_text(JOB_SCRIPT)
        begun = datetime.now(UTC)
        tick_cron, chain_cron = chaos_crons(begun, self.cfg.duration * 0.8)
        # The crons fire for whole minutes: a quiet moment before this is not the end (a slot
        # after it would start a run, or a chain, that the stopped launchers never finish).
        self.window_end = chaos_window_end(begun, self.cfg.duration * 0.8)
        catalog = CATALOG.format(
            py=sys.executable, script=script, tick_cron=tick_cron, chain_cron=chain_cron
        )
        if not self.cfg.schedules:
            self.window_end = begun
            catalog = catalog.split("  tick:\n", 1)[0]  # the jobs before the scheduled ones
        (work / "catalog.yaml").write_text(catalog)
        with psycopg.connect(self.cfg.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.db_name}"')  # our own name, not input
        subprocess.run(
            [sys.executable, "-m", "runlane", "db", "upgrade"],
            env=self.env(),
            check=True,
            capture_output=True,
            timeout=60,
        )
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(AUDIT_SQL)
            if self.broker is not None:
                from runlane.testing.broker_faults import OUTBOX_AUDIT_SQL

                conn.execute(OUTBOX_AUDIT_SQL)

    def start_launcher(self, slot: int) -> None:
        log = (self.cfg.workdir / f"launcher-{slot}.log").open("ab")
        self.logs.append(log)
        self.procs[slot] = subprocess.Popen(
            [sys.executable, "-m", "runlane", "serve"],
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def teardown(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGCONT)
                    proc.kill()
                proc.wait(timeout=30)
        for log in self.logs:
            log.close()
        with (
            contextlib.suppress(psycopg.Error),
            psycopg.connect(self.cfg.admin_url, autocommit=True) as conn,
        ):
            conn.execute(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')

    # ------------------------------------------------------------------ the run

    async def produce(self, stop_at: float) -> None:
        """Accept `runs` runs at a steady pace through the one accept path, surviving outages.
        Deterministic dedupe keys make a retried accept after an ambiguous commit harmless."""
        from runlane.catalog import load_catalog
        from runlane.core.runs import Trigger
        from runlane.errors import StoreError
        from runlane.service.accept import RunRequest, accept_run
        from runlane.service.wiring import store_from_url

        catalog = load_catalog(self.cfg.workdir / "catalog.yaml")
        jobs = [j for j, _ in JOB_MIX]
        weights = [w for _, w in JOB_MIX]
        store = store_from_url(
            self.url, application_name="chaos-producer", outbox=self.broker is not None
        )
        await store.open()
        try:
            pace = max(0.0, (stop_at - time.monotonic()) / self.cfg.runs)
            for i in range(self.cfg.runs):
                job = self.rnd.choices(jobs, weights)[0]
                req = RunRequest(
                    job=job, trigger=Trigger.CLI, dedupe_key=f"chaos-{i}", requested_by="chaos"
                )
                while True:
                    try:
                        await accept_run(store, catalog, req)
                        break
                    except StoreError:
                        await asyncio.sleep(0.5)
                await asyncio.sleep(pace)
        finally:
            await store.close()

    async def apply_chaos(self, stop_at: float) -> None:
        restart_at = time.monotonic() + self.cfg.duration / 2 if self.cfg.restart_postgres else None
        actions = ["kill", "pause"]
        if self.broker is not None and self.cfg.broker_faults:
            actions = ["kill", "broker_stop", "pause", "close_connections"]
        done = 0
        while time.monotonic() < stop_at:
            await asyncio.sleep(self.cfg.chaos_every * self.rnd.uniform(0.6, 1.4))
            if restart_at is not None and time.monotonic() >= restart_at:
                restart_at = None
                await asyncio.to_thread(restart_postgres)
                self.report.postgres_restarts += 1
                continue
            slot = self.rnd.randrange(self.cfg.launchers)
            action = actions[done % len(actions)]
            done += 1
            proc = self.procs[slot]
            if self.broker is not None and action == "broker_stop":
                await asyncio.to_thread(self.broker.stop_app)
                await asyncio.sleep(self.cfg.chaos_every / 2)  # runs go on from the database
                await asyncio.to_thread(self.broker.start_app)
                self.report.broker_stops += 1
            elif self.broker is not None and action == "close_connections":
                closed = await asyncio.to_thread(self.broker.close_connections)
                self.report.connections_closed += closed
            elif action == "kill":
                proc.send_signal(signal.SIGKILL)
                await asyncio.to_thread(proc.wait, 30)
                self.report.kills += 1
                self.start_launcher(slot)
            else:
                proc.send_signal(signal.SIGSTOP)
                await asyncio.sleep(self.cfg.lease_ttl * 1.6)  # stalled past its lease
                proc.send_signal(signal.SIGCONT)
                self.report.pauses += 1

    async def drain(self) -> None:
        deadline = time.monotonic() + self.cfg.drain_timeout
        while time.monotonic() < deadline:
            try:
                with psycopg.connect(self.url) as conn:
                    row = conn.execute(
                        "SELECT (SELECT count(*) FROM run_log"
                        "        WHERE status IN ('queued', 'running'))"
                        "     + (SELECT count(*) FROM chain_runs WHERE status = 'running')"
                        "     + (SELECT count(*) FROM outbox WHERE published_at IS NULL)"
                    ).fetchone()
                if (
                    row is not None
                    and row[0] == 0
                    and datetime.now(UTC) >= self.window_end
                    and (self.broker is None or await self.broker.job_runs_depth() == 0)
                ):
                    return
            except psycopg.OperationalError:
                pass
            await asyncio.sleep(0.5)
        self.report.violations.append(
            f"runs still active (or the outbox or job_runs not empty) after "
            f"{self.cfg.drain_timeout:.0f}s of draining"
        )

    def stop_launchers(self) -> None:
        for slot, proc in self.procs.items():
            proc.send_signal(signal.SIGCONT)
            # A launcher restarted by the last kill may still be importing Python, before any
            # handler exists (serve takes the signal from its first line of its own): wait for
            # the handler, as a SIGTERM then is what is tested, not the interpreter's start.
            deadline = time.monotonic() + 30
            while proc.poll() is None and not handles_signal(proc.pid, signal.SIGTERM):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
                self.report.violations.append(f"launcher {slot} did not stop on SIGTERM")
            if code != 0:
                self.report.violations.append(
                    f"launcher {slot} exited with {code} on SIGTERM; its log ends:\n"
                    + self.log_tail(slot)
                )

    def log_tail(self, slot: int, size: int = 3000) -> str:
        """The last `size` bytes of a launcher's log, for a violation that needs its story."""
        path = self.cfg.workdir / f"launcher-{slot}.log"
        try:
            data = path.read_bytes()[-size:]
        except OSError as exc:
            return f"(unreadable: {exc})"
        return data.decode("utf-8", "replace")

    # ------------------------------------------------------------------ the checks

    def check(self) -> None:
        with psycopg.connect(self.url, row_factory=dict_row) as conn:
            runs = conn.execute("SELECT * FROM run_log").fetchall()
            audit = conn.execute("SELECT * FROM chaos_audit ORDER BY id").fetchall()
            chains = conn.execute("SELECT * FROM chain_runs").fetchall()
        rep = self.report
        rep.scheduled = sum(1 for r in runs if r["trigger"] == "schedule")
        rep.chain_runs = len(chains)
        rep.violations += [
            f"chain run {c['id']} ({c['chain']}) never finished: {c['status']}"
            for c in chains
            if c["status"] == "running"
        ]
        if self.cfg.schedules and (rep.scheduled == 0 or rep.chain_runs == 0):
            rep.violations.append(
                f"the schedules did not fire ({rep.scheduled} scheduled runs, "
                f"{rep.chain_runs} chain runs)"
            )
        rep.runs = len(runs)
        rep.audited_writes = len(audit)
        rep.statuses = Counter(r["status"] for r in runs)
        rep.first_attempts = len({r["dedupe_key"].split("#", 1)[0] for r in runs})
        manual = len(
            {r["dedupe_key"].split("#", 1)[0] for r in runs if r["dedupe_key"].startswith("chaos-")}
        )
        if manual < self.cfg.runs:
            rep.violations.append(f"only {manual} of {self.cfg.runs} accepted runs are in the log")
        lines = self.ledger.read_text().splitlines() if self.ledger.exists() else []
        rep.ledger_lines = len(lines)
        rep.violations += attempt_violations(runs)
        rep.violations += limit_violations(runs, slack=3 * self.cfg.lease_ttl + 30)
        rep.violations += ledger_violations(lines, runs)
        rep.violations += audit_violations(audit)

    async def check_broker(self) -> None:
        """The outbox drained and every fact and command went through the broker."""
        from runlane.testing.broker_faults import broker_violations

        if self.broker is None:
            return
        with psycopg.connect(self.url, row_factory=dict_row) as conn:
            outbox = conn.execute("SELECT * FROM chaos_outbox ORDER BY id").fetchall()
        state = await self.broker.collect()
        self.report.outbox_rows = len(outbox)
        self.report.facts_seen = sum(state.facts.values())
        self.report.violations += broker_violations(outbox, state)

    async def run(self) -> ChaosReport:
        started = time.monotonic()
        self.setup()
        try:
            if self.broker is not None:
                await self.broker.prepare()
            for slot in range(self.cfg.launchers):
                self.start_launcher(slot)
            stop_at = time.monotonic() + self.cfg.duration
            await asyncio.gather(self.produce(stop_at), self.apply_chaos(stop_at))
            await self.drain()
            self.stop_launchers()
            self.check()
            if self.broker is not None:
                await self.check_broker()
        finally:
            if self.broker is not None and self.cfg.broker_faults:
                # Whatever happened, the broker is back for the others.
                with contextlib.suppress(subprocess.SubprocessError, RuntimeError):
                    await asyncio.to_thread(self.broker.start_app)
            self.teardown()
            self.report.seconds = time.monotonic() - started
        return self.report


Row = dict[str, Any]


def attempt_violations(runs: list[Row]) -> list[str]:
    """Exactly one row per attempt of every dedupe key; retries only after failure or timeout,
    and a retry after every retryable failure with attempts left."""
    v: list[str] = []
    by_key: dict[str, list[Row]] = defaultdict(list)
    for r in runs:
        by_key[r["dedupe_key"].split("#", 1)[0]].append(r)
    for key, rows in by_key.items():
        attempts = sorted(r["attempt"] for r in rows)
        if attempts != list(range(1, len(rows) + 1)):
            v.append(f"{key}: attempts {attempts} are not exactly one row per attempt")
            continue
        last = max(rows, key=lambda r: r["attempt"])
        for r in rows:
            if r["attempt"] < last["attempt"] and r["status"] not in ("failure", "timeout"):
                v.append(f"{key}: attempt {r['attempt']} ended {r['status']} but was retried")
        if (
            last["status"] in ("failure", "timeout")
            and last["attempt"] < last["max_attempts"]
            and last["error_code"] not in ("command_not_found", "permission_denied")
        ):
            v.append(
                f"{key}: attempt {last['attempt']} ended {last['status']} with attempts left "
                "and no retry"
            )
    return v


def limit_violations(runs: list[Row], *, slack: float) -> list[str]:
    """Every run final, and none ran longer than its deadline + kill grace + `slack`."""
    v: list[str] = []
    for r in runs:
        if r["status"] in ("queued", "running"):
            v.append(f"run {r['id']} ({r['job']}) never reached a final status: {r['status']}")
            continue
        if r["started_at"] is not None and r["finished_at"] is not None:
            took = (r["finished_at"] - r["started_at"]).total_seconds()
            limit = r["deadline_seconds"] + r["kill_grace_seconds"] + slack
            if took > limit:
                v.append(
                    f"run {r['id']} ({r['job']}) took {took:.1f}s, past its limit {limit:.0f}s"
                )
    return v


def ledger_violations(lines: list[str], runs: list[Row]) -> list[str]:
    """No attempt executed twice; every `success` row executed."""
    v: list[str] = []
    executed = Counter(tuple(line.split()) for line in lines if line.strip())
    for (run_id, attempt), n in executed.items():
        if n > 1:
            v.append(f"run {run_id} attempt {attempt} executed {n} times")
    for r in runs:
        if r["status"] == "success" and (str(r["id"]), str(r["attempt"])) not in executed:
            v.append(f"run {r['id']} is success but never executed")
    return v


def audit_violations(audit: list[Row]) -> list[str]:
    """A fenced write (any launcher write to a running row, except the unleased orphan sweep)
    must come from the run's current lease owner."""
    v: list[str] = []
    for a in audit:
        writer = a["writer"]
        if not writer.startswith(LAUNCHER_PREFIX):
            continue  # cancels and other unleased writes by people and tools
        if a["old_status"] != "running" or a["end_reason"] == "orphaned":
            continue  # claims take a new lease; the orphan sweep is unleased by design
        owner = a["lease_owner"] or ""
        if writer != (LAUNCHER_PREFIX + owner)[:63]:
            v.append(
                f"stale write accepted on run {a['run_id']}: {writer} wrote "
                f"{a['old_status']}→{a['new_status']} under {owner}'s lease "
                f"(generation {a['new_generation']})"
            )
    return v


def run_chaos(config: ChaosConfig) -> ChaosReport:
    return asyncio.run(Harness(config).run())
