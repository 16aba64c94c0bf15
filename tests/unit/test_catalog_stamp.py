"""The catalog digest a launcher reports and the CLI compares: what changes it and what does not,
and when a job is known to no live launcher."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from runlane.catalog import parse_catalog_text
from runlane.ports import Heartbeat
from runlane.service.catalog_stamp import (
    catalog_digest,
    catalog_state,
    chain_warning,
    changed_message,
    launchers_lacking,
    live_launchers,
    nobody_knows,
    stale_bound,
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


def beat_of(
    launcher_id: str,
    *,
    host: str = "here",
    path: str | None = None,
    chains: tuple[str, ...] | None = None,
    digest: str | None = "sha256:" + "0" * 64,
) -> Heartbeat:
    t = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
    return Heartbeat(
        launcher_id,
        host,
        1,
        "test",
        t,
        beat_at=t,
        catalog_digest=digest,
        catalog_loaded_at=t,
        catalog_jobs=(),
        catalog_path=path,
        catalog_chains=chains,
    )


def test_a_changed_catalog_is_named_by_the_file_the_launcher_read(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "catalog.yaml").write_text("version: 1\njobs: {}\n")
    (tmp_path / "link").symlink_to(real)
    read = str((real / "catalog.yaml").resolve())
    # The same file through a symlink and `..`, on the same host: that file has changed.
    via_link = str(tmp_path / "link" / ".." / "link" / "catalog.yaml")
    assert changed_message(beat_of("L1", path=read), via_link, host="here") == (
        f"launcher L1 loaded {read} at 2026-12-01T03:00:00Z; it has changed since: restart it "
        "to apply the change"
    )
    # The same path on another host names another file.
    assert changed_message(beat_of("L1", host="worker-7", path=read), via_link, host="here") == (
        f"launcher L1 runs {read} on worker-7 (loaded at 2026-12-01T03:00:00Z), which differs "
        f"from {via_link} here: restart it on the catalog it should run"
    )
    # An older runlane does not say which file: nothing is claimed about it.
    assert "runs the catalog loaded at" in changed_message(
        beat_of("L1"), "catalog.yaml", host="here"
    )
    # Heartbeat text cannot break the line or reach the terminal as control characters.
    odd = changed_message(beat_of("L\n1", host="h\x1b[2J", path="/x\ny"), "c.yaml", host="here")
    assert "\n" not in odd
    assert "\x1b" not in odd
    assert "L\\n1" in odd


def test_chain_run_warns_only_when_no_live_launcher_has_the_chain() -> None:
    file_digest = "sha256:" + "f" * 64
    lists_it = beat_of("new", chains=("nightly",))
    lacks_it = beat_of("other", chains=("weekly",), path="/etc/runlane/catalog.yaml")
    older = beat_of("old", chains=None)  # a runlane that lists no chains, on another catalog
    assert chain_warning("nightly", [], file_digest, "c.yaml") is None  # nobody: said elsewhere
    assert chain_warning("nightly", [lists_it, lacks_it], file_digest, "c.yaml") is None
    assert chain_warning("nightly", [lists_it, older], file_digest, "c.yaml") is None  # mixed
    known = chain_warning("nightly", [lacks_it], file_digest, "c.yaml")
    assert known is not None
    assert known.startswith(
        "no running launcher has chain 'nightly' (other: catalog 000000000000 from "
        "/etc/runlane/catalog.yaml loaded at 2026-12-01T03:00:00Z)"
    )
    hedged = chain_warning("nightly", [lacks_it, older], file_digest, "c.yaml")
    assert hedged is not None
    assert hedged.startswith("every running launcher runs another catalog than c.yaml")
    current = beat_of("old", chains=None, digest=file_digest)  # runs the file's catalog
    assert chain_warning("nightly", [lacks_it, current], file_digest, "c.yaml") is None


def test_a_launcher_is_live_for_three_of_its_own_heartbeat_intervals() -> None:
    """A launcher beating every minute is live 50 s after its last beat, whatever the reader's
    own setting (45 s by default); one of an older runlane (no interval reported) is judged by
    the reader's setting."""
    now = datetime(2026, 12, 1, 3, 0, 50, tzinfo=UTC)
    slow = replace(beat_of("slow"), heartbeat_interval=60.0)  # last beat 50 s ago
    older = beat_of("older")  # the same age, no interval reported
    assert [h.launcher_id for h in live_launchers([slow, older], now, 45.0)] == ["slow"]
    fast = replace(beat_of("fast"), heartbeat_interval=5.0)
    assert live_launchers([fast], now, 45.0) == []  # silent for 10 of its intervals
    assert stale_bound(slow, 45.0) == 180.0
    assert stale_bound(older, 45.0) == 45.0
