"""Chain planning: which steps of a chain run start, wait or are skipped, as a pure function of
the steps' latest statuses and `now`.

- A step starts when every parent satisfies its `after` condition: `success` (the parent
  succeeded) or `finish` (it reached any final status, skipped included).
- A parent that ended without success under `on: success` skips the step (`upstream_failed`),
  and so, transitively, the steps that depend on it with `on: success`; `on: finish` dependents
  still run.
- A step with `latest` starts at that instant even if a parent is still running.
- Past the chain's deadline (`max_duration`), steps not yet started are skipped (`chain_timeout`),
  queued ones included, and the chain run is overrun.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from runlane.core.runs import chain_dedupe_key

# Scheduled chain runs get a deterministic id, so every launcher names the same run the same way.
CHAIN_NAMESPACE = uuid.UUID("6f1d3f52-9a43-4f0e-8d5e-2b8f3c1a7e10")


def chain_slot_key(chain: str, slot: datetime) -> str:
    """The dedupe key of chain `chain`'s run for the scheduled slot `slot` (UTC)."""
    return f"{chain}@{slot.strftime('%Y-%m-%dT%H:%M:%SZ')}"


def scheduled_chain_run_id(chain: str, slot: datetime) -> str:
    """The id every launcher gives chain `chain`'s run for `slot`: a UUID of its slot key."""
    return str(uuid.uuid5(CHAIN_NAMESPACE, chain_slot_key(chain, slot)))


FINAL = frozenset({"success", "failure", "timeout", "skipped", "cancelled"})


@dataclass(frozen=True, slots=True)
class StepSpec:
    """One step: the job it runs, its parents as (step, on) pairs, and its `latest` instant."""

    name: str
    job: str
    after: tuple[tuple[str, Literal["success", "finish"]], ...] = ()
    latest: datetime | None = None


@dataclass(frozen=True, slots=True)
class ChainPlan:
    start: tuple[str, ...] = ()
    skip: tuple[tuple[str, str], ...] = ()  # (step, end_reason)
    expire_queued: tuple[str, ...] = ()  # queued steps to end `skipped`/`chain_timeout`
    overrun: bool = False
    done: bool = False
    outcome: Literal["success", "failure"] | None = None
    statuses: Mapping[str, str] = field(default_factory=dict)  # after this plan, as far as known


def topological_order(steps: Mapping[str, StepSpec]) -> list[str]:
    """Steps with every parent before its children (ties in name order). The catalog refuses
    cycles, so every step appears."""
    order: list[str] = []
    placed: set[str] = set()
    remaining = sorted(steps)
    while remaining:
        progressed = False
        for name in list(remaining):
            if all(parent in placed or parent not in steps for parent, _ in steps[name].after):
                order.append(name)
                placed.add(name)
                remaining.remove(name)
                progressed = True
        if not progressed:  # a cycle: keep the rest in name order rather than loop forever
            order.extend(remaining)
            break
    return order


def plan_chain(
    steps: Mapping[str, StepSpec],
    statuses: Mapping[str, str],
    now: datetime,
    deadline_at: datetime | None,
) -> ChainPlan:
    """Decide what to do with a running chain. `statuses` holds the status of each step's latest
    attempt (steps without a row are absent)."""
    timed_out = deadline_at is not None and now >= deadline_at
    eff = dict(statuses)
    start: list[str] = []
    skip: list[tuple[str, str]] = []
    expire: list[str] = []
    for name in topological_order(steps):
        step = steps[name]
        current = eff.get(name)
        if current is not None:
            if current == "queued" and timed_out:
                expire.append(name)
                eff[name] = "skipped"
            continue
        if timed_out:
            skip.append((name, "chain_timeout"))
            eff[name] = "skipped"
            continue
        upstream_failed = False
        ready = True
        for parent, on in step.after:
            parent_status = eff.get(parent)
            parent_final = parent_status in FINAL
            if on == "success":
                if parent_final and parent_status != "success":
                    upstream_failed = True
                if parent_status != "success":
                    ready = False
            elif not parent_final:
                ready = False
        if upstream_failed:
            skip.append((name, "upstream_failed"))
            eff[name] = "skipped"
        elif ready or (step.latest is not None and now >= step.latest):
            start.append(name)
            eff[name] = "queued"
    done = all(eff.get(name) in FINAL for name in steps)
    outcome: Literal["success", "failure"] | None = None
    if done:
        outcome = "success" if all(eff[name] == "success" for name in steps) else "failure"
    return ChainPlan(
        start=tuple(start),
        skip=tuple(skip),
        expire_queued=tuple(expire),
        overrun=timed_out,
        done=done,
        outcome=outcome,
        statuses=eff,
    )


def step_dedupe_key(step: str, job: str, chain_root_id: str) -> str:
    """`job@chain_root`; a step whose job has another name adds `/step`, so the same job can
    appear twice in one chain."""
    key = chain_dedupe_key(job, chain_root_id)
    return key if step == job else f"{key}/{step}"


def step_of(dedupe_key: str, job: str, chain_root_id: str) -> str | None:
    """The step a chain run row belongs to (its key may carry a retry suffix `#n`)."""
    base = dedupe_key.split("#", 1)[0]
    if base == f"{job}@{chain_root_id}":
        return job
    prefix = f"{job}@{chain_root_id}/"
    if base.startswith(prefix):
        return base[len(prefix) :]
    return None
