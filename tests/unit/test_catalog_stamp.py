"""The catalog digest a launcher reports and the CLI compares: what changes it and what does not,
and when a job is known to no live launcher."""

from __future__ import annotations

from datetime import UTC, datetime

from runlane.catalog import parse_catalog_text
from runlane.ports import Heartbeat
from runlane.service.catalog_stamp import (
    catalog_digest,
    catalog_state,
    launchers_lacking,
    nobody_knows,
    stamp_catalog,
)

TEXT = """
version: 1
global: {max_deadline: 2h, manual_queue_ttl: 30m}
defaults: {executor: inline, deadline: 1h}
jobs:
  beta:
    command: [echo, b]
    schedules: [{cron: "0 3 * * *"}]
  alpha:
    command: [echo, a]
"""

# The same catalog: other layout, key order, comments, quoting, duration spellings.
SAME = """# jobs of the team
version: 1
defaults:
  deadline: 60m   # an hour
  executor: "inline"
global:
  manual_queue_ttl: 1800s
  max_deadline: 120m
jobs:
  alpha: {command: [echo, a]}
  beta:
    schedules:
      - cron: "0 3 * * *"
    command: ["echo", "b"]
"""

T0 = datetime(2031, 1, 2, 3, 4, 5, tzinfo=UTC)


def digest(text: str) -> str:
    return catalog_digest(parse_catalog_text(text))


def test_an_edit_that_changes_nothing_the_launcher_does_keeps_the_digest() -> None:
    assert digest(TEXT).startswith("sha256:")
    assert len(digest(TEXT)) == len("sha256:") + 64
    assert digest(SAME) == digest(TEXT)


def test_any_change_to_what_the_launcher_runs_changes_the_digest() -> None:
    changed = [
        TEXT.replace("[echo, a]", "[echo, A]"),  # a command
        TEXT + "  gamma:\n    command: [echo, c]\n",  # a new job
        TEXT.replace("deadline: 1h", "deadline: 2h"),  # a default
        TEXT.replace('"0 3 * * *"', '"0 4 * * *"'),  # a schedule
    ]
    digests = {digest(text) for text in changed}
    assert len(digests) == len(changed)
    assert digest(TEXT) not in digests


def test_the_stamp_lists_the_job_names_sorted() -> None:
    stamp = stamp_catalog(parse_catalog_text(TEXT))
    assert stamp.jobs == ("alpha", "beta")
    assert stamp.digest == digest(TEXT)


def beat(launcher_id: str, jobs: tuple[str, ...] | None, digest_: str | None = None) -> Heartbeat:
    return Heartbeat(
        launcher_id, "h", 1, "0.1.0", T0, beat_at=T0, catalog_digest=digest_, catalog_jobs=jobs
    )


def test_catalog_state_compares_digests_and_says_unknown_without_one() -> None:
    d = digest(TEXT)
    assert catalog_state(beat("a", (), d), d) == "current"
    assert catalog_state(beat("a", (), d), digest(SAME + "  x: {command: [x]}\n")) == "changed"
    assert catalog_state(beat("a", None, None), d) == "unknown"  # an older runlane's launcher
    assert catalog_state(beat("a", (), d), None) == "unknown"  # the file does not load


def test_nobody_knows_a_job_only_when_every_live_launcher_is_known_to_lack_it() -> None:
    old = beat("old", ("alpha",))
    other_old = beat("other", ())
    restarted = beat("new", ("alpha", "fresh"))
    silent = beat("legacy", None)  # reports no job list
    assert nobody_knows("fresh", [old, other_old])
    assert [h.launcher_id for h in launchers_lacking("fresh", [old, restarted, silent])] == ["old"]
    assert not nobody_knows("fresh", [old, restarted])
    assert not nobody_knows("fresh", [old, silent])  # cannot tell: no warning
    assert not nobody_knows("fresh", [])  # no launcher at all is another warning
    assert not nobody_knows("alpha", [old])
