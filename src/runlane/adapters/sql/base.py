"""What both SQL stores do the same way: the single-statement methods of the Store port,
written once over four dialect primitives, and the parameters built from runlane's records.

A dialect supplies `_read_one`/`_read_all` (a read), `_write_one`/`_write_all`/`_write_many`
(one write transaction; SQLite takes the write lock, PostgreSQL autocommits), `_execute` (a
statement whose result nobody reads), `_param_time` (a time as the dialect binds it),
`_is_id` (PostgreSQL: is this a UUID; a malformed id matches no row without asking),
`_param_since` (now minus some seconds, for a dialect that cannot subtract them in SQL) and
`_read` (its `RowReader`). The hot paths (accept, claim, renew, finish_many) stay in each
dialect's store, written for its driver: none of them goes through this class.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from runlane.adapters.sql.rows import Row, RowReader, dump_json, run_status, running_by_launcher
from runlane.core.admission import Candidate, select_admissible
from runlane.core.records import (
    AuditEntry,
    ChainRun,
    Event,
    EventLink,
    Heartbeat,
    IdempotencyRecord,
    Override,
    RunFilter,
    TokenRecord,
    WebSession,
)
from runlane.core.runs import NewRun, Outcome, Run, RunStatus
from runlane.errors import NotFound, StoreError, TokenExists
from runlane.ports.bus import TOPIC_RUN_QUEUED, OutboxMessage

OUTBOX_TOPIC_RUN_QUEUED = TOPIC_RUN_QUEUED


def outbox_payload(new: NewRun) -> str:
    """The run command the bus relay publishes for a queued run (the ADR's fields; the row
    stays the authority), with the run's `traceparent` when it has one, for the relay to send
    as the message's header too."""
    payload: dict[str, object] = {
        "run_id": new.id,
        "job": new.job,
        "params": new.params,
        "trigger": str(new.trigger),
        "requested_by": new.requested_by,
        "dedupe_key": new.dedupe_key,
        "parent_run_id": new.parent_run_id,
        "chain_root_id": new.chain_root_id,
        "event_id": new.event_id,
        "downstream": new.downstream,
        "scheduled_for": None if new.scheduled_for is None else new.scheduled_for.isoformat(),
        "attempt": new.attempt,
        "executor": new.executor,
    }
    if new.traceparent is not None:
        payload["traceparent"] = new.traceparent
    return dump_json(payload)


async def wait_for_event(event: asyncio.Event, max_wait: float) -> bool:
    """Wait until `event` is set (then clear it: one wake-up per set) or `max_wait` seconds
    pass; True when woken. The stores' `Wakeups.wait_for_wakeup`."""
    try:
        # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation that
        # arrives as the event fires (gh-86296).
        async with asyncio.timeout(max(0.0, max_wait)):
            await event.wait()
    except TimeoutError:
        return False
    event.clear()
    return True


def seconds_since(ended_monotonic: float | None) -> float:
    """How long ago a run ended (`FinishRequest.ended_monotonic`): 0 when unknown, never less."""
    if ended_monotonic is None:
        return 0.0
    return max(0.0, time.monotonic() - ended_monotonic)


def outcome_params(outcome: Outcome) -> dict[str, object]:
    """The outcome's columns, as the `finish*` statements name them."""
    return outcome.columns()


def run_params(new: NewRun, status: RunStatus, end_reason: str | None) -> dict[str, object]:
    """The `insert_run` parameters both dialects bind the same way (every column of `new` but
    its times, which each dialect adds as it binds time)."""
    return {
        "id": new.id,
        "job": new.job,
        "status": status.value,
        "trigger": str(new.trigger),
        "requested_by": new.requested_by,
        "params": dump_json(new.params),
        "dedupe_key": new.dedupe_key,
        "parent_run_id": new.parent_run_id,
        "chain_root_id": new.chain_root_id,
        "event_id": new.event_id,
        "downstream": None if new.downstream is None else dump_json(new.downstream),
        "attempt": new.attempt,
        "retry_of": new.retry_of,
        "max_attempts": new.max_attempts,
        "deadline_seconds": float(new.deadline_seconds),
        "kill_grace_seconds": float(new.kill_grace_seconds),
        "executor": new.executor,
        "overlap": new.overlap,
        "end_reason": end_reason,
        "note": new.note,
        "traceparent": new.traceparent,
    }


def admit(
    cand_rows: Sequence[Row],
    count_rows: Sequence[Row],
    executor_caps: Mapping[str, int],
    limit: int,
) -> list[str]:
    """`select_admissible` over claim-candidate rows (in claim order) and the rows of
    `running_counts` (job, executor, n)."""
    by_job: dict[str, int] = {}
    by_executor: dict[str, int] = {}
    for row in count_rows:
        n = RowReader.integer(row, "n")
        job = RowReader.text(row, "job")
        executor = RowReader.text(row, "executor")
        by_job[job] = by_job.get(job, 0) + n
        by_executor[executor] = by_executor.get(executor, 0) + n
    candidates = [
        Candidate(
            id=RowReader.text(r, "id"),
            job=RowReader.text(r, "job"),
            executor=RowReader.text(r, "executor"),
            overlap=RowReader.text(r, "overlap"),
        )
        for r in cand_rows
    ]
    return select_admissible(candidates, by_job, by_executor, executor_caps, limit)


# The run list's filters, in the order their clauses are joined: `list_runs_where_<name>` in
# each dialect's queries.sql. The parameter that says whether a filter is set, when not its name.
RUN_LIST_FILTERS = (
    "job",
    "status",
    "trigger",
    "requested_by",
    "parent_run_id",
    "chain_root_id",
    "retry_of",
    "since",
    "until",
    "before",
)
_RUN_LIST_PARAM = {"before": "before_id"}


# The basic view's columns (`list_run_items(basic=True)`, the API's `view=basic`): every column
# of run_log, the same in both dialects, but the three whose size has no small bound
# (`core.runs.BASIC_LEFT_OUT`: a finished run's saved tail is up to 64 KiB) and the lease token.
# What a list shows; a page of 50 runs with their tails would read megabytes. A conformance test
# holds this to the schema (a new column is listed here or left out on purpose).
RUN_LIST_BASIC_COLUMNS = (
    "id", "job", "status", "trigger", "dedupe_key", "attempt", "executor", "overlap",
    "queued_at", "requested_by", "parent_run_id", "chain_root_id", "event_id", "downstream",
    "scheduled_for", "retry_of", "max_attempts", "deadline_seconds", "kill_grace_seconds",
    "external_id", "not_before", "queue_expires_at", "started_at", "finished_at", "deadline_at",
    "exit_code", "end_reason", "error_code", "traceparent", "cancel_requested_at",
    "lease_owner", "lease_generation", "lease_expires_at",
)  # fmt: skip
RUN_LIST_BASIC_SELECT = f"SELECT {', '.join(RUN_LIST_BASIC_COLUMNS)}\nFROM run_log"


def run_list_statement(
    statements: dict[str, str], filters: tuple[str, ...], *, basic: bool = False
) -> str:
    """The name of the run-list statement for this set of filters, composed once from the
    dialect's fixed clause texts and kept in `statements` under `list_runs[job,status]`
    (`list_runs_basic[…]` with `basic`: `RUN_LIST_BASIC_SELECT`, not the dialect's select).

    One text per shape (at most 2**10, in practice a handful) rather than one text with
    `(:x IS NULL OR col = :x)` for every filter: PostgreSQL's generic plan of that text cannot
    use any filter's index, so it walked the whole run log under a prepared statement.
    """
    name = f"list_runs{'_basic' if basic else ''}[{','.join(filters)}]"
    if name not in statements:
        clauses = [statements[f"list_runs_where_{f}"] for f in filters]
        parts = [RUN_LIST_BASIC_SELECT if basic else statements["list_runs_select"]]
        if clauses:
            parts.append("WHERE " + "\n  AND ".join(clauses))
        parts.append(statements["list_runs_order"])
        statements[name] = "\n".join(parts)  # same text every time: a benign race
    return name


# A canonical UUID's text, as every run and chain run id is written: hex digits and the four
# hyphens at these places.
_UUID_SHAPE = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
_HEX = frozenset("0123456789abcdef")


def uuid_prefix_bounds(prefix: str) -> tuple[str, str] | None:
    """The lowest and the highest canonical UUID that begin with `prefix` (lowercase), or None
    when none can. Every id with that prefix lies between the two, in the text order of SQLite's
    ids and in PostgreSQL's uuid order (byte order, the order of the lowercase hex), so a range
    on the primary key finds them all, however old."""
    if len(prefix) > len(_UUID_SHAPE):
        return None
    for ch, shape in zip(prefix, _UUID_SHAPE, strict=False):
        if (ch != "-") if shape == "-" else (ch not in _HEX):
            return None
    rest = _UUID_SHAPE[len(prefix) :]
    return prefix + rest.replace("x", "0"), prefix + rest.replace("x", "f")


class SqlStoreBase:
    """The Store methods that are one statement (or one batch) in both dialects."""

    _read: RowReader
    _statements: dict[str, str]  # the dialect's named statements (its `Q`)

    # --- the dialect's primitives -------------------------------------------------------------

    async def _read_one(self, name: str, params: Mapping[str, object]) -> Row | None:
        raise NotImplementedError

    async def _read_all(self, name: str, params: Mapping[str, object]) -> list[Row]:
        raise NotImplementedError

    async def _write_one(self, name: str, params: Mapping[str, object]) -> Row | None:
        raise NotImplementedError

    async def _write_all(self, name: str, params: Mapping[str, object]) -> list[Row]:
        raise NotImplementedError

    async def _write_many(self, name: str, params: Sequence[Mapping[str, object]]) -> None:
        raise NotImplementedError

    async def _execute(self, name: str, params: Mapping[str, object]) -> None:
        raise NotImplementedError

    def _param_time(self, value: datetime | None) -> object:
        raise NotImplementedError

    def _param_now(self) -> object:
        raise NotImplementedError

    def _is_id(self, value: str) -> bool:
        return True

    def _id_key(self, value: str) -> str:
        """`value` as the database compares run ids (SQLite: the text itself)."""
        return value

    def _param_since(self, seconds: float) -> object:
        """Now minus `seconds`, bound as `:since` (SQLite); PostgreSQL subtracts `:seconds` in
        SQL from its own now and binds None."""
        raise NotImplementedError

    def _ago(self, seconds: float) -> dict[str, object]:
        """The parameters of "`seconds` ago" every dialect's statements take."""
        return {"now": self._param_now(), "seconds": seconds, "since": self._param_since(seconds)}

    # --- runs ---------------------------------------------------------------------------------

    async def get_run(self, run_id: str) -> Run:
        row = await self._read_one("get_run", {"id": run_id}) if self._is_id(run_id) else None
        if row is None:
            raise NotFound(f"no run {run_id}")
        return self._read.run(row)

    async def run_statuses(self, run_ids: Sequence[str]) -> dict[str, RunStatus]:
        # The rows' ids come back as the database writes them: matched to the ids as given
        # through the dialect's canonical form (a PostgreSQL uuid in capitals, say).
        wanted = {self._id_key(run_id): run_id for run_id in run_ids if self._is_id(run_id)}
        if not wanted:
            return {}
        rows = await self._read_all("run_statuses", {"ids": dump_json(list(wanted))})
        return {
            wanted[key]: run_status(row["status"])
            for row in rows
            if (key := self._id_key(str(row["id"]))) in wanted
        }

    async def run_ids_by_prefix(self, prefix: str, *, limit: int) -> list[str]:
        return await self._ids_by_prefix("run_ids_by_prefix", prefix, limit)

    async def _ids_by_prefix(self, name: str, prefix: str, limit: int) -> list[str]:
        bounds = uuid_prefix_bounds(prefix)
        if bounds is None or limit <= 0:
            return []
        rows = await self._read_all(name, {"lo": bounds[0], "hi": bounds[1], "limit": limit})
        return [str(row["id"]) for row in rows]

    async def run_by_dedupe_key(self, dedupe_key: str) -> Run | None:
        row = await self._read_one("run_by_dedupe_key", {"dedupe_key": dedupe_key})
        return None if row is None else self._read.run(row)

    async def list_runs(self, flt: RunFilter) -> list[Run]:
        return [self._read.run(r) for r in await self._run_list_rows(flt)]

    async def list_run_items(self, flt: RunFilter, *, basic: bool = False) -> list[dict[str, Any]]:
        run_item = self._read.run_item
        return [run_item(r, basic=basic) for r in await self._run_list_rows(flt, basic=basic)]

    async def _run_list_rows(self, flt: RunFilter, *, basic: bool = False) -> list[Row]:
        ids = (
            flt.parent_run_id,
            flt.chain_root_id,
            flt.retry_of,
            None if flt.before is None else flt.before[1],
        )
        if any(value is not None and not self._is_id(value) for value in ids):
            return []
        params: dict[str, object] = {
            "job": flt.job,
            "status": None if flt.status is None else flt.status.value,
            "trigger": flt.trigger,
            "requested_by": flt.requested_by,
            "parent_run_id": flt.parent_run_id,
            "chain_root_id": flt.chain_root_id,
            "retry_of": flt.retry_of,
            "since": self._param_time(flt.since),
            "until": self._param_time(flt.until),
            "before_at": None if flt.before is None else self._param_time(flt.before[0]),
            "before_id": None if flt.before is None else flt.before[1],
            "limit": max(0, flt.limit),
        }
        keys = tuple(k for k in RUN_LIST_FILTERS if params[_RUN_LIST_PARAM.get(k, k)] is not None)
        return await self._read_all(run_list_statement(self._statements, keys, basic=basic), params)

    async def count_queued(self) -> int:
        row = await self._read_one("count_queued", {})
        return 0 if row is None else RowReader.integer(row, "n")

    async def queued_by_executor(self) -> dict[str, int]:
        rows = await self._read_all("queued_by_executor", {})
        return {RowReader.text(r, "executor"): RowReader.integer(r, "n") for r in rows}

    async def outbox_oldest_pending(self) -> datetime | None:
        row = await self._read_one("outbox_oldest_pending", {})
        return None if row is None else self._read.time(row, "created_at")

    # --- the outbox relay (ports.store.Outbox) ------------------------------------------------

    async def outbox_lease(
        self, owner: str, *, limit: int, lease_seconds: float
    ) -> list[OutboxMessage]:
        if limit <= 0:
            return []
        rows = await self._write_all(
            "outbox_lease",
            {
                "owner": owner,
                "limit": limit,
                "lease_seconds": lease_seconds,
                "now": self._param_now(),
                "lease_until": self._param_since(-lease_seconds),
            },
        )
        messages = [
            OutboxMessage(
                message_id=str(RowReader.integer(r, "id")),
                topic=RowReader.text(r, "topic"),
                payload=RowReader.text(r, "payload"),
                created_at=self._read.time(r, "created_at"),
                key=None if r["msg_key"] is None else str(r["msg_key"]),
            )
            for r in rows
        ]
        return sorted(messages, key=lambda m: int(m.message_id))

    async def outbox_mark_sent(self, ids: Sequence[str]) -> None:
        if ids:
            await self._execute(
                "outbox_mark_sent",
                {"ids": dump_json([int(i) for i in ids]), "now": self._param_now()},
            )

    async def outbox_release(self, owner: str, ids: Sequence[str]) -> None:
        if ids:
            await self._execute(
                "outbox_release", {"ids": dump_json([int(i) for i in ids]), "owner": owner}
            )

    async def outbox_prune(self, *, keep_seconds: float, limit: int = 5000) -> int:
        rows = await self._write_all(
            "outbox_prune_returning",
            {
                "keep_seconds": keep_seconds,
                "limit": limit,
                "cutoff": self._param_since(keep_seconds),
            },
        )
        return len(rows)

    async def outbox_pending(self) -> int:
        row = await self._read_one("outbox_pending_count", {})
        return 0 if row is None else RowReader.integer(row, "n")

    async def outbox_add_fact(self, topic: str, payload: str, *, key: str | None) -> None:
        await self._execute(
            "insert_outbox_fact",
            {"topic": topic, "payload": payload, "key": key, "now": self._param_now()},
        )

    async def set_bus_facts(self, enabled: bool) -> None:
        await self._execute("set_bus_facts", {"facts": enabled})

    async def running_by_launcher(self) -> dict[str, dict[str, int]]:
        return running_by_launcher(await self._read_all("running_by_launcher", {}))

    async def cancel_requests(self, owner: str) -> list[str]:
        rows = await self._read_all("cancel_requests", {"owner": owner})
        return [RowReader.text(r, "id") for r in rows]

    async def expire_queued(self, *, limit: int = 500) -> list[Run]:
        rows = await self._write_all("expire_queued", {"now": self._param_now(), "limit": limit})
        return sorted((self._read.run(r) for r in rows), key=lambda r: (r.queued_at, r.id))

    # --- overrides and launchers --------------------------------------------------------------

    async def set_override(
        self, job: str, *, paused_until: datetime | None, reason: str | None, by: str | None
    ) -> Override:
        params = {
            "now": self._param_now(),
            "job": job,
            "paused_until": self._param_time(paused_until),
            "reason": reason,
            "created_by": by,
        }
        row = await self._write_one("set_override", params)
        if row is None:
            raise StoreError(f"override for job {job} was not saved")
        return self._read.override(row)

    async def clear_override(self, job: str) -> bool:
        return await self._write_one("clear_override", {"job": job}) is not None

    async def overrides(self) -> dict[str, Override]:
        rows = await self._read_all("overrides", {})
        return {o.job: o for o in (self._read.override(r) for r in rows)}

    async def beat(self, hb: Heartbeat) -> None:
        t = self._param_time
        params = {
            "now": self._param_now(),
            "launcher_id": hb.launcher_id,
            "host": hb.host,
            "pid": hb.pid,
            "version": hb.version,
            "started_at": t(hb.started_at),
            "queue_depth": hb.queue_depth,
            "running": dump_json(dict(hb.running)),
            "catalog_digest": hb.catalog_digest,
            "catalog_loaded_at": t(hb.catalog_loaded_at),
            "catalog_jobs": None if hb.catalog_jobs is None else dump_json(list(hb.catalog_jobs)),
            "catalog_path": hb.catalog_path,
            "heartbeat_interval": hb.heartbeat_interval,
            "log_dir": hb.log_dir,
            "bus_queue_depth": hb.bus_queue_depth,
            "bus_dlq_depth": hb.bus_dlq_depth,
            "catalog_chains": (
                None if hb.catalog_chains is None else dump_json(list(hb.catalog_chains))
            ),
        }
        await self._execute("beat", params)

    async def launchers(self) -> list[Heartbeat]:
        return [self._read.heartbeat(r) for r in await self._read_all("launchers", {})]

    async def remove_launcher(self, launcher_id: str) -> None:
        await self._execute("remove_launcher", {"launcher_id": launcher_id})

    # --- schedules ----------------------------------------------------------------------------

    async def schedule_states(self) -> dict[str, datetime]:
        rows = await self._read_all("schedule_states", {})
        read = self._read
        return {RowReader.text(r, "schedule_key"): read.time(r, "last_slot") for r in rows}

    async def advance_schedules(self, slots: Mapping[str, datetime]) -> None:
        if not slots:
            return
        now = self._param_now()
        params = [
            {"schedule_key": key, "last_slot": self._param_time(slot), "now": now}
            for key, slot in sorted(slots.items())
        ]
        await self._write_many("advance_schedule", params)

    # --- chain runs ---------------------------------------------------------------------------

    async def get_chain_run(self, chain_run_id: str) -> ChainRun:
        row = None
        if self._is_id(chain_run_id):
            row = await self._read_one("get_chain_run", {"id": chain_run_id})
        if row is None:
            raise NotFound(f"no chain run {chain_run_id}")
        return self._read.chain_run(row)

    async def chain_run_ids_by_prefix(self, prefix: str, *, limit: int) -> list[str]:
        return await self._ids_by_prefix("chain_run_ids_by_prefix", prefix, limit)

    async def active_chain_runs(
        self, *, after: ChainRun | None = None, limit: int = 500
    ) -> list[ChainRun]:
        params = {
            "after_at": None if after is None else self._param_time(after.started_at),
            "after_id": None if after is None else after.id,
            "limit": max(0, limit),
        }
        return [self._read.chain_run(r) for r in await self._read_all("active_chain_runs", params)]

    async def list_chain_runs(self, *, chain: str | None = None, limit: int = 50) -> list[ChainRun]:
        rows = await self._read_all("list_chain_runs", {"chain": chain, "limit": max(0, limit)})
        return [self._read.chain_run(r) for r in rows]

    async def mark_chain_overrun(self, chain_run_id: str) -> ChainRun:
        row = None
        if self._is_id(chain_run_id):
            params = {"now": self._param_now(), "id": chain_run_id}
            row = await self._write_one("mark_chain_overrun", params)
        if row is None:
            raise NotFound(f"no chain run {chain_run_id}")
        return self._read.chain_run(row)

    async def finish_chain_run(
        self, chain_run_id: str, status: str, end_reason: str | None = None
    ) -> ChainRun | None:
        if not self._is_id(chain_run_id):
            return None
        params = {
            "now": self._param_now(),
            "id": chain_run_id,
            "status": status,
            "end_reason": end_reason,
        }
        row = await self._write_one("finish_chain_run", params)
        return None if row is None else self._read.chain_run(row)

    # --- events -------------------------------------------------------------------------------

    async def get_event(self, event_id: str) -> Event:
        row = await self._read_one("get_event", {"id": event_id})
        if row is None:
            raise NotFound(f"no event {event_id}")
        return self._read.event(row)

    async def list_events(self, *, key: str | None = None, limit: int = 50) -> list[Event]:
        rows = await self._read_all("list_events", {"key": key, "limit": max(0, limit)})
        return [self._read.event(r) for r in rows]

    async def link_event_runs(self, links: Sequence[EventLink]) -> None:
        params = [
            {"event_id": x.event_id, "run_id": x.run_id, "job": x.job, "started": x.started}
            for x in links
            if self._is_id(x.run_id)
        ]
        if params:
            await self._write_many("link_event_run", params)

    async def event_links(self, event_id: str) -> list[EventLink]:
        rows = await self._read_all("event_runs", {"event_id": event_id})
        return [RowReader.event_link(r) for r in rows]

    async def events_of_run(self, run_id: str) -> list[EventLink]:
        if not self._is_id(run_id):
            return []
        rows = await self._read_all("events_of_run", {"run_id": run_id})
        return [RowReader.event_link(r) for r in rows]

    # --- API tokens, the audit log, idempotency keys ------------------------------------------

    async def create_token(self, record: TokenRecord) -> TokenRecord:
        params = {
            "now": self._param_now(),
            "name": record.name,
            "role": record.role.value,
            "jobs": dump_json(list(record.jobs)),
            "secret_hash": record.secret_hash,
            "prefix": record.prefix,
            "created_by": record.created_by,
            "expires_at": self._param_time(record.expires_at),
        }
        row = await self._write_one("insert_token", params)
        if row is None:
            raise TokenExists(f"a token named {record.name!r} exists already")
        return self._read.token(row)

    async def token_by_hash(self, secret_hash: str) -> TokenRecord | None:
        params = {"now": self._param_now(), "secret_hash": secret_hash}
        row = await self._read_one("token_by_hash", params)
        return None if row is None else self._read.token(row)

    async def tokens(self) -> list[TokenRecord]:
        return [self._read.token(r) for r in await self._read_all("tokens", {})]

    async def revoke_token(self, name: str) -> TokenRecord | None:
        row = await self._write_one("revoke_token", {"now": self._param_now(), "name": name})
        return None if row is None else self._read.token(row)

    async def touch_token(self, name: str, *, every: float = 60.0) -> None:
        await self._execute("touch_token", {"name": name, **self._ago(every)})

    # --- the web UI: sessions and login codes ---------------------------------------------------

    async def latest_runs(self, jobs: Sequence[str]) -> dict[str, Run]:
        if not jobs:
            return {}
        rows = await self._read_all("latest_runs", {"jobs": dump_json(list(jobs))})
        return {run.job: run for run in map(self._read.run, rows)}

    def _web_session(self, row: Row) -> WebSession:
        token = self._read.token(
            {
                "name": row["token_name"],
                **{key[6:]: value for key, value in row.items() if key.startswith("token_")},
            }
        )
        return WebSession(
            id=self._read.text(row, "id"),
            token=token,
            created_at=self._read.time(row, "created_at"),
            expires_at=self._read.time(row, "expires_at"),
            last_seen_at=self._read.time(row, "last_seen_at"),
        )

    async def create_web_session(
        self, session_id: str, token_name: str, *, lifetime: float
    ) -> WebSession | None:
        params = {
            "id": session_id,
            "token_name": token_name,
            "now": self._param_now(),
            "absolute": lifetime,
            "expires_at": self._param_since(-lifetime),  # SQLite: now + lifetime
        }
        await self._write_one("insert_web_session", params)
        return await self.web_session(session_id, idle=lifetime)

    async def web_session(self, session_id: str, *, idle: float) -> WebSession | None:
        params = {
            "id": session_id,
            "now": self._param_now(),
            "idle": idle,
            "idle_since": self._param_since(idle),
        }
        row = await self._read_one("web_session", params)
        return None if row is None else self._web_session(row)

    async def touch_web_session(self, session_id: str, *, every: float = 60.0) -> None:
        await self._execute("touch_web_session", {"id": session_id, **self._ago(every)})

    async def delete_web_session(self, session_id: str) -> bool:
        return await self._write_one("delete_web_session", {"id": session_id}) is not None

    async def prune_web_sessions(self, *, idle: float) -> int:
        params = {"now": self._param_now(), "idle": idle, "idle_since": self._param_since(idle)}
        sessions = await self._write_all("prune_web_sessions", params)
        codes = await self._write_all("prune_login_codes", {"now": self._param_now()})
        return len(sessions) + len(codes)

    async def create_login_code(self, code_id: str, token_name: str, *, ttl: float) -> None:
        params = {
            "id": code_id,
            "token_name": token_name,
            "now": self._param_now(),
            "ttl": ttl,
            "expires_at": self._param_since(-ttl),  # SQLite: now + ttl
        }
        if await self._write_one("insert_login_code", params) is None:
            raise StoreError("the login code was not saved")

    async def redeem_login_code(self, code_id: str) -> str | None:
        row = await self._write_one("redeem_login_code", {"id": code_id, "now": self._param_now()})
        return None if row is None else self._read.text(row, "token_name")

    async def count_tokens(self) -> int:
        row = await self._read_one("count_tokens", {})
        return 0 if row is None else self._read.integer(row, "n")

    async def record_audit(self, entry: AuditEntry) -> AuditEntry:
        params = {
            "now": self._param_now(),
            "actor": entry.actor,
            "action": entry.action,
            "target": entry.target,
            "outcome": entry.outcome,
            "remote": entry.remote,
            "detail": entry.detail,
        }
        row = await self._write_one("insert_audit", params)
        if row is None:
            raise StoreError(f"the audit entry of {entry.action} was not saved")
        return self._read.audit_entry(row)

    async def audit(self, *, limit: int = 50, before: int | None = None) -> list[AuditEntry]:
        rows = await self._read_all("audit", {"limit": max(0, limit), "before": before})
        return [self._read.audit_entry(r) for r in rows]

    async def reserve_key(
        self,
        owner: str,
        key: str,
        fingerprint: str,
        *,
        reservation: str,
        ttl: float,
        abandoned: float,
    ) -> IdempotencyRecord | None:
        # Two statements, no transaction: when the insert loses to another reservation, the row
        # read next is that one (or, were it released in between, none: then try once more).
        names = {"owner": owner, "key": key}
        for _ in range(3):
            params = {
                **names,
                "fingerprint": fingerprint,
                "reservation": reservation,
                **self._ago(ttl),
                "abandoned_seconds": abandoned,
                "abandoned_since": self._param_since(abandoned),
            }
            if await self._write_one("reserve_key", params) is not None:
                return None
            row = await self._read_one("idempotency_key", names)
            if row is not None:
                return self._read.idempotency(row)
        raise StoreError(f"idempotency key {key!r} could not be reserved")

    async def complete_key(
        self, owner: str, key: str, status: int, body: str, *, reservation: str
    ) -> bool:
        params = {
            "owner": owner,
            "key": key,
            "status": status,
            "body": body,
            "reservation": reservation,
        }
        return await self._write_one("complete_key", params) is not None

    async def release_key(self, owner: str, key: str, *, reservation: str) -> bool:
        params = {"owner": owner, "key": key, "reservation": reservation}
        return await self._write_one("release_key", params) is not None

    async def prune_keys(self, older_than: float) -> int:
        return len(await self._write_all("prune_keys", self._ago(older_than)))


__all__ = [
    "OUTBOX_TOPIC_RUN_QUEUED",
    "SqlStoreBase",
    "admit",
    "outbox_payload",
    "outcome_params",
    "run_params",
    "seconds_since",
    "uuid_prefix_bounds",
    "wait_for_event",
]
