"""`views.run_dict`, the JSON shape of a run for every face: its fast path (plain values as they
are) gives exactly what converting every field with `jsonable` gives, in the same key order."""

from __future__ import annotations

import json
from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta, timezone

from runlane.core.runs import Run, RunStatus, Trigger
from runlane.service.views import HIDDEN, jsonable, run_dict

T0 = datetime(2031, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)


def generic(run: Run) -> dict[str, object]:
    data = {f.name: jsonable(getattr(run, f.name)) for f in fields(run) if f.name not in HIDDEN}
    if run.params is None:
        data["params_raw"] = run.params_raw
    return data


def test_run_dict_is_every_field_converted_in_row_order() -> None:
    full = Run(
        id="5d1b7c1e-2f0c-4d59-9d7a-2f6f0a5e8c11",
        job="nightly",
        status=RunStatus.FAILURE,
        trigger=Trigger.MANUAL,
        dedupe_key="k",
        attempt=2,
        executor="inline",
        overlap="allow",
        params={"week": 1, "when": T0, "tags": ("a", "b")},
        params_raw='{"week":1}',
        queued_at=T0,
        requested_by="ana",
        downstream=["b"],
        started_at=T0.astimezone(timezone(timedelta(hours=5))),  # shown in UTC all the same
        finished_at=T0 + timedelta(seconds=3),
        exit_code=1,
        deadline_seconds=60.0,
        lease_token="secret",
        lease_generation=3,
    )
    for run in (full, replace(full, params=None, params_raw="{not json", exit_code=None)):
        shown = run_dict(run)
        assert shown == generic(run)
        assert list(shown) == list(generic(run))
        assert shown["status"] == "failure"
        assert type(shown["status"]) is str
        assert type(shown["trigger"]) is str
        assert shown["started_at"] == "2031-03-04T05:06:07.123456Z"
        assert "lease_token" not in shown
        json.dumps(shown)  # every value is JSON as it is
    assert "params_raw" in run_dict(replace(full, params=None))
    assert "params_raw" not in run_dict(full)
