"""Admission: which queued runs may start now, given what is already running.

Overlap and caps are derived from rows in `queued`/`running`, never from a counter, so any final
status frees them (Dagster and Prefect both leaked slots with separate counters).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Candidate:
    """A queued run that is due, as the claim query sees it (in claim order)."""

    id: str
    job: str
    executor: str
    overlap: str


def select_admissible(
    candidates: Sequence[Candidate],
    running_by_job: Mapping[str, int],
    running_by_executor: Mapping[str, int],
    executor_caps: Mapping[str, int],
    limit: int,
) -> list[str]:
    """Ids of the candidates to claim, in order, at most `limit`.

    - `overlap` `forbid` or `queue`: at most one running run of the job at a time (forbid is
      enforced at accept time too; a queued forbid run still waits its turn here).
    - `executor_caps` (e.g. `{"pod": max_concurrent_pods}`): global caps on running runs per
      executor across every launcher.
    - Runs skipped here stay queued for a later claim: no reordering beyond this batch.
    """
    if limit <= 0:
        return []
    by_job = dict(running_by_job)
    by_executor = dict(running_by_executor)
    chosen: list[str] = []
    for cand in candidates:
        if len(chosen) >= limit:
            break
        if cand.overlap != "allow" and by_job.get(cand.job, 0) > 0:
            continue
        cap = executor_caps.get(cand.executor)
        if cap is not None and by_executor.get(cand.executor, 0) >= cap:
            continue
        chosen.append(cand.id)
        by_job[cand.job] = by_job.get(cand.job, 0) + 1
        by_executor[cand.executor] = by_executor.get(cand.executor, 0) + 1
    return chosen
