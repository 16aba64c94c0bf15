"""Which catalog a launcher runs, and whether the catalog file changed after it loaded it.

`runlane serve` reads the catalog once, at start, and reports a stamp of it (digest, time, job
names) with every heartbeat. The CLI reads the file on every command, stamps what it read and
compares: `runlane status` and `doctor` name the launchers on an older catalog, `runlane run`
warns when no live launcher knows the job it queued.
"""

from __future__ import annotations

import hashlib
import json
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

from runlane.catalog import Catalog
from runlane.ports import Heartbeat

DIGEST_PREFIX = "sha256:"

CatalogState = Literal["current", "changed", "unknown"]


@dataclass(frozen=True, slots=True)
class CatalogStamp:
    """What a launcher reports of its catalog: `digest`, the job and chain names, sorted."""

    digest: str
    jobs: tuple[str, ...]
    chains: tuple[str, ...] = ()


def catalog_digest(catalog: Catalog) -> str:
    """`sha256:<hex>` of the parsed catalog's canonical JSON: the fields the file sets (YAML
    names, defaults left out), keys sorted, durations as seconds.

    Of the parsed catalog rather than the file's bytes: the launcher holds the catalog it acts
    on, not the bytes it read (reading the file again could hash a newer version than the one
    it runs), and an edit that changes nothing the launcher does (a comment, the layout, key
    order, `60m` for `1h`) is not a change to restart for. Defaults are left out so that a
    runlane that adds a field with a default computes the same digest for the same file as an
    older launcher does."""
    data = catalog.model_dump(mode="json", by_alias=True, exclude_unset=True)
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return DIGEST_PREFIX + hashlib.sha256(text.encode("utf-8")).hexdigest()


def stamp_catalog(catalog: Catalog) -> CatalogStamp:
    return CatalogStamp(
        digest=catalog_digest(catalog),
        jobs=tuple(catalog.job_names()),
        chains=tuple(sorted(catalog.chains)),
    )


def short_digest(digest: str | None) -> str:
    """The first 12 hex digits, for people (`sha256:` dropped)."""
    if digest is None:
        return "-"
    return digest.removeprefix(DIGEST_PREFIX)[:12]


def at_seconds(value: datetime) -> str:
    """UTC ISO-8601 to the second with a Z: `2026-12-01T03:00:00Z`, for one-line messages."""
    return value.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def stale_bound(launcher: Heartbeat, stale_after: float) -> float:
    """How old `launcher`'s last beat may be while it counts as live: three of its own
    intervals, as its heartbeat reports them (a launcher beating every minute is not stale after
    45 s); `stale_after` (the reader's setting) for a runlane that does not report one."""
    if launcher.heartbeat_interval is None:
        return stale_after
    return 3 * launcher.heartbeat_interval


def live_launchers(
    launchers: Sequence[Heartbeat], now: datetime, stale_after: float
) -> list[Heartbeat]:
    """The launchers whose last heartbeat is recent enough (`stale_bound`)."""
    return [
        h
        for h in launchers
        if h.beat_at is not None
        and now - h.beat_at <= timedelta(seconds=stale_bound(h, stale_after))
    ]


def on_other_catalogs(
    launchers: Sequence[Heartbeat],
    now: datetime,
    stale_after: float,
    *,
    launcher_id: str | None,
    catalog_digest: str | None,
) -> list[Heartbeat]:
    """The live launchers other than `launcher_id` that run another catalog than
    `catalog_digest`, or do not say which (an older runlane): those that may have a job, chain
    or schedule this one lacks."""
    return [
        h
        for h in live_launchers(launchers, now, stale_after)
        if h.launcher_id != launcher_id
        and (h.catalog_digest is None or h.catalog_digest != catalog_digest)
    ]


def catalog_state(launcher: Heartbeat, file_digest: str | None) -> CatalogState:
    """`current` when the launcher runs the catalog the file holds now, `changed` when the
    file changed after it loaded it, `unknown` when either side has no digest (an unreadable
    file, a launcher of a runlane that does not report one)."""
    if launcher.catalog_digest is None or file_digest is None:
        return "unknown"
    return "current" if launcher.catalog_digest == file_digest else "changed"


def shown(text: str) -> str:
    """`text` from a heartbeat (a path, an id) for a one-line message: anything that is not
    printable (a newline, an escape) is written as its escape, so it cannot break the line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def on_this_host(launcher: Heartbeat, host: str | None = None) -> bool:
    """Whether `launcher` runs on this machine (`host`: this machine's name; the host name by
    default, as launchers report theirs). A path in its heartbeat names a file here only then."""
    return launcher.host == (host if host is not None else socket.gethostname())


def same_file(launcher: Heartbeat, catalog_path: str, host: str | None = None) -> bool:
    """Whether `launcher` read the file `catalog_path` names here: the same host (a path on
    another machine names another file) and the same resolved path."""
    if launcher.catalog_path is None:
        return False
    if not on_this_host(launcher, host):
        return False
    return launcher.catalog_path == str(Path(catalog_path).resolve())


def changed_message(launcher: Heartbeat, catalog_path: str, host: str | None = None) -> str:
    """One line: which launcher runs another catalog than `catalog_path` holds, which file it
    read, where and when (as far as its heartbeat says), and what to do."""
    name = shown(launcher.launcher_id)
    loaded = at_seconds(launcher.catalog_loaded_at or launcher.started_at)
    theirs = launcher.catalog_path
    if theirs is None:  # an older runlane: it does not say which file it read
        return (
            f"launcher {name} runs the catalog loaded at {loaded}; {catalog_path} has changed "
            "since: restart it to apply the change"
        )
    if same_file(launcher, catalog_path, host):
        return (
            f"launcher {name} loaded {shown(theirs)} at {loaded}; it has changed since: restart "
            "it to apply the change"
        )
    if on_this_host(launcher, host):
        return (
            f"launcher {name} runs {shown(theirs)} (loaded at {loaded}), which differs from "
            f"{catalog_path}: restart it on the catalog it should run"
        )
    return (
        f"launcher {name} runs {shown(theirs)} on {shown(launcher.host)} (loaded at {loaded}), "
        f"which differs from {catalog_path} here: restart it on the catalog it should run"
    )


def launcher_catalogs(live: Sequence[Heartbeat], most: int = 3) -> str:
    """`L1: catalog <12 hex> from /etc/runlane/catalog.yaml loaded at T, …`: what each
    launcher's heartbeat says of its catalog (the file only when it says)."""
    return ", ".join(
        f"{shown(h.launcher_id)}: catalog {short_digest(h.catalog_digest)}"
        + (f" from {shown(h.catalog_path)}" if h.catalog_path is not None else "")
        + f" loaded at {at_seconds(h.catalog_loaded_at or h.started_at)}"
        for h in live[:most]
    ) + (", …" if len(live) > most else "")


def chain_warning(
    chain: str, live: Sequence[Heartbeat], file_digest: str, catalog_path: str
) -> str | None:
    """What `runlane chain run` warns when no live launcher has `chain`: its first steps run,
    but nobody advances it until a launcher on a catalog with the chain runs. None when one
    lists the chain (in a mixed fleet, whatever the older ones run), or when there is no
    launcher (a separate warning says so). Launchers of an older runlane list no chains: with
    any of them, it warns only when every launcher runs another catalog than the file, and says
    what cannot be ruled out."""
    if not live or any(chain in (h.catalog_chains or ()) for h in live):
        return None
    if all(h.catalog_chains is not None for h in live):
        return (
            f"no running launcher has chain {chain!r} ({launcher_catalogs(live)}): restart "
            "`runlane serve` on a catalog that has it, or the chain does not advance (it fails "
            "`unknown_chain` once no launcher can advance it)"
        )
    if any(catalog_state(h, file_digest) != "changed" for h in live):
        return None
    return (
        f"every running launcher runs another catalog than {catalog_path}: if chain {chain!r} "
        "or its jobs were added since, restart `runlane serve`, or the chain does not advance"
    )


def launchers_lacking(job: str, launchers: Sequence[Heartbeat]) -> list[Heartbeat]:
    """The launchers (of those given) whose catalog is known not to define `job`."""
    return [h for h in launchers if h.catalog_jobs is not None and job not in h.catalog_jobs]


def nobody_knows_message(
    job: str, live: Sequence[Heartbeat], catalog_path: str, file_digest: str | None
) -> str:
    """One line: no live launcher has `job`, from what their heartbeats say: each launcher's
    catalog by digest, file (when its heartbeat says; an older runlane does not) and load time.
    `file_digest` is the digest of the catalog `catalog_path` holds now, which has the job."""
    shown = launcher_catalogs(live)
    file_catalog = f" (catalog {short_digest(file_digest)})" if file_digest is not None else ""
    return (
        f"no running launcher knows job {job!r}: the catalog each one runs has no such job "
        f"({shown}), while {catalog_path}{file_catalog} has it"
    )


def nobody_knows(job: str, live: Sequence[Heartbeat]) -> bool:
    """True when there are live launchers and every one of them is known to lack `job`: a run
    of it waits (kept for repair, `unknown_job`) until a launcher is restarted. False when any
    live launcher knows it, or cannot tell (no job list reported)."""
    return bool(live) and len(launchers_lacking(job, live)) == len(live)
