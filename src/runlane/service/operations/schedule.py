"""The schedule table: every slot of every schedule and chain in a range, with local and UTC
time, season, and whether it would fire (paused, out of season)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from runlane.errors import InvalidArgument, RunlaneError
from runlane.ports import Store
from runlane.service.config import Settings
from runlane.service.operations.arguments import (
    LATEST,
    RANGE_TEXT,
    check_days,
    check_range,
    parse_time,
)
from runlane.service.operations.notices import Notice
from runlane.service.runtime import Runtime

if TYPE_CHECKING:
    from runlane.core.schedule import Pause, SlotRow

# The schedule table holds at most this many slots (a year of an every-5-minutes schedule).
MAX_SCHEDULE_ROWS = 100_000


@dataclass(frozen=True, slots=True)
class ScheduleTable:
    """The slots in [start, end), in time order. `notes`: `pauses_not_shown` when the database
    could not be read (every slot is shown as if no job were paused), `rows_truncated` when the
    range holds more than MAX_SCHEDULE_ROWS slots."""

    start: datetime
    end: datetime
    rows: tuple[SlotRow, ...]
    notes: tuple[Notice, ...]


async def schedule_table(
    source: Runtime | Settings,
    *,
    start: str | datetime | None = None,
    end: str | datetime | None = None,
    days: float = 7.0,
) -> ScheduleTable:
    """The table from `start` (default now) to `end` (default `days` later; at most ten years)
    of an open runtime's catalog (a server, which has one), or of the catalog file `Settings`
    name (the CLI). It needs no database: the pauses are read from it when it can be read, and
    a note says when they could not. `invalid_argument` for a bad time or range,
    `catalog_invalid`."""
    from runlane.catalog.loader import load_catalog
    from runlane.core.schedule import schedule_table as plan_table
    from runlane.service.scheduler import schedule_specs

    check_days(days)
    now = datetime.now(UTC)
    t0 = parse_time(start, now, "--from")
    start_text = start.isoformat() if isinstance(start, datetime) else start
    end_text = end.isoformat() if isinstance(end, datetime) else end
    if end is None:
        t1 = t0 + timedelta(days=days)
        if t1 >= LATEST:
            raise InvalidArgument(
                f"--from {start_text!r} --days {days:g}: the range must end {RANGE_TEXT}"
            )
    else:
        t1 = parse_time(end, t0, "--to")
    check_range(t0, t1, start_text, end_text)
    cat = (
        source.require_catalog()
        if isinstance(source, Runtime)
        else load_catalog(source.catalog_path)
    )
    notes: list[Notice] = []
    pauses: dict[str, Pause] = {}
    try:
        if isinstance(source, Runtime):
            pauses = await pauses_now(source.store)
        else:
            pauses = await read_pauses(source)
    except RunlaneError as exc:
        notes.append(Notice("pauses_not_shown", f"pauses not shown ({exc.message})", "note"))
    # [start, end): a slot exactly at start is in the range, one exactly at end is not (`--days
    # 1` of an hourly schedule is 24 slots). plan_table takes start < slot <= end; slots are
    # whole seconds.
    tick = timedelta(microseconds=1)
    rows = plan_table(
        schedule_specs(cat), t0 - tick, t1 - tick, paused=pauses, limit=MAX_SCHEDULE_ROWS + 1
    )
    if len(rows) > MAX_SCHEDULE_ROWS:
        rows = rows[:MAX_SCHEDULE_ROWS]
        last = rows[-1].slot.astimezone(UTC).isoformat().replace("+00:00", "Z")
        notes.append(
            Notice(
                "rows_truncated",
                f"the range holds more than {MAX_SCHEDULE_ROWS:,} slots; shown are the first "
                f"{MAX_SCHEDULE_ROWS:,}, which end at {last} (later slots, and any others at "
                "that time, are not): narrow it with --from/--to or --days",
                "note",
            )
        )
    return ScheduleTable(t0, t1, tuple(rows), tuple(notes))


async def read_pauses(settings: Settings) -> dict[str, Pause]:
    """The jobs paused now in the database `settings` name (opened for this, and closed)."""
    from runlane.service.runtime import open_runtime

    async with open_runtime(settings, catalog=False) as rt:
        return await pauses_now(rt.store)


async def pauses_now(store: Store) -> dict[str, Pause]:
    """The jobs paused now (by the database's clock), each with its pause."""
    from runlane.service.scheduler import pause_of

    db_now = await store.now()
    found = {}
    for job, override in (await store.overrides()).items():
        pause = pause_of(override, db_now)
        if pause is not None:
            found[job] = pause
    return found
