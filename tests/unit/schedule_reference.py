"""A brute-force reference for the planner: walk every UTC minute and apply the DST rule as
written, with nothing from `runlane.core.schedule` (5-field expressions only)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from runlane.core.cron import parse_cron

MINUTE = timedelta(minutes=1)


def reference_slots(expr: str, zone: str, after: datetime, until: datetime) -> list[datetime]:
    """Slots in (after, until], minute by minute."""
    cron = parse_cron(expr)
    assert not cron.has_seconds
    real_time = cron.hour_field == "*" or cron.hour_field.startswith("*/")
    tz = ZoneInfo(zone)
    minutes = cron.minutes
    first = int(after.timestamp()) // 60 * 60 + 60
    last = int(until.timestamp()) // 60 * 60
    prev_wall = datetime.fromtimestamp(first - 60, tz).replace(tzinfo=None)
    out: list[datetime] = []
    for ts in range(first, last + 1, 60):
        local = datetime.fromtimestamp(ts, tz)
        wall = local.replace(tzinfo=None)
        fire = False
        if local.minute in minutes and cron.matches(wall):
            # Real time fires in both occurrences of a repeated hour; fixed hours only the first.
            fire = real_time or local.fold == 0
        if not real_time and not fire and wall - prev_wall > MINUTE:
            # Fixed hours: a wall time skipped by a spring-forward fires now, the first instant
            # after the gap.
            skipped = prev_wall + MINUTE
            while skipped < wall:
                if cron.matches(skipped):
                    fire = True
                    break
                skipped += MINUTE
        prev_wall = wall
        if fire:
            out.append(datetime.fromtimestamp(ts, UTC))
    return out
