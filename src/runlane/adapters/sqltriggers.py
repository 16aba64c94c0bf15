"""Row decoding for the trigger tables (`chain_runs`, `events`, `event_runs`), shared by the SQL
store adapters. The SQL itself lives in each dialect's `queries.sql`."""

from __future__ import annotations

from collections.abc import Mapping

from runlane.adapters.sqlcommon import RowReader, parse_params
from runlane.ports import ChainRun, Event, EventLink

Row = Mapping[str, object]


def chain_run(read: RowReader, row: Row) -> ChainRun:
    return ChainRun(
        id=read.text(row, "id"),
        chain=read.text(row, "chain"),
        dedupe_key=read.text(row, "dedupe_key"),
        trigger=read.text(row, "trigger"),
        status=read.text(row, "status"),
        started_at=read.time(row, "started_at"),
        requested_by=read.opt_text(row, "requested_by"),
        scheduled_for=read.opt_time(row, "scheduled_for"),
        end_reason=read.opt_text(row, "end_reason"),
        deadline_at=read.opt_time(row, "deadline_at"),
        finished_at=read.opt_time(row, "finished_at"),
        overrun_at=read.opt_time(row, "overrun_at"),
    )


def event(read: RowReader, row: Row) -> Event:
    return Event(
        id=read.text(row, "id"),
        key=read.text(row, "key"),
        data=parse_params(read.opt_text(row, "data") or ""),
        occurred_at=read.time(row, "occurred_at"),
    )


def event_link(row: Row) -> EventLink:
    return EventLink(
        event_id=RowReader.text(row, "event_id"),
        run_id=RowReader.text(row, "run_id"),
        job=RowReader.text(row, "job"),
        started=bool(row["started"]),
    )
