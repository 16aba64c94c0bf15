"""The catalog checks that span sections: reserved fields, param names, event listeners, the
params of jobs that triggers start, profiles, deadlines, seasons, chain steps and their cycles."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runlane.catalog.models import (
    RESERVED_FIELDS,
    Chain,
    Defaults,
    GlobalSettings,
    Job,
    Profile,
    is_valid_name,
)
from runlane.catalog.params import PARAM_NAME_RE, ParamSpec
from runlane.catalog.problems import Loc, ProblemReport, did_you_mean
from runlane.core.durations import MAX_DURATION_SECONDS, format_duration, parse_duration


@dataclass
class ValidSections:
    """The parts of the catalog that validated, for the cross-reference checks."""

    global_: GlobalSettings | None = None
    defaults: Defaults | None = None
    profiles: dict[str, Profile] = field(default_factory=dict)
    jobs: dict[str, Job] = field(default_factory=dict)
    chains: dict[str, Chain] = field(default_factory=dict)
    names: dict[str, set[str]] = field(default_factory=dict)


def check_name(kind: str, name: str, loc: Loc, report: ProblemReport) -> None:
    """A problem at the key `loc` unless `name` is a valid name for a `kind` (job, step, …)."""
    if not is_valid_name(name):
        report.add(
            loc,
            f"{kind} name {name!r} is not allowed: use lowercase letters, digits, '.', '_' and '-', "
            "starting with a letter or digit, at most 63 characters",
            key=True,
        )


def check_cross_references(
    data: dict[str, Any], valid: ValidSections, report: ProblemReport
) -> None:
    """Checks that span sections. They read the raw data defensively, so that one job's type
    error does not hide its unknown profile or a chain's cycle."""
    _check_reserved(data, report)
    _check_param_names(data, report)
    _check_nested_names(data, report)
    _check_listeners(data, report)
    profile_names = valid.names.get("profiles", set())
    job_names = valid.names.get("jobs", set())
    raw_global = data.get("global")
    raw_global = raw_global if isinstance(raw_global, dict) else {}
    max_deadline: float | None = GlobalSettings().max_deadline
    if valid.global_ is not None:
        max_deadline = valid.global_.max_deadline
    elif "max_deadline" in raw_global:
        max_deadline = _raw_duration(raw_global, "max_deadline")
    raw_seasons = raw_global.get("seasons")
    season_names: set[str] | None = set(raw_seasons) if isinstance(raw_seasons, dict) else None
    if raw_seasons is None:
        season_names = set()
    defaults_deadline = _raw_duration(data.get("defaults"), "deadline")
    if (
        max_deadline is not None
        and defaults_deadline is not None
        and defaults_deadline > max_deadline
    ):
        report.add(
            ("defaults", "deadline"),
            _deadline_message("defaults.deadline", defaults_deadline, max_deadline),
        )
    for name, body in _named_bodies(data, "jobs"):
        profile = body.get("profile")
        if isinstance(profile, str) and profile not in profile_names:
            report.add(
                ("jobs", name, "profile"),
                f"job {name!r} uses unknown profile {profile!r}{did_you_mean(profile, profile_names)}",
            )
        deadline = _raw_duration(body, "deadline")
        if max_deadline is not None and deadline is not None and deadline > max_deadline:
            report.add(
                ("jobs", name, "deadline"),
                _deadline_message(f"job {name!r} deadline", deadline, max_deadline),
            )
    for name, body in _named_bodies(data, "chains"):
        _check_chain(name, body, job_names, season_names, report)
    _check_triggered_params(data, report)


def _raw_duration(section: object, key: str) -> float | None:
    """The duration at `section[key]` if it is there and valid (else pydantic reports it)."""
    if not isinstance(section, dict):
        return None
    value = section.get(key)
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    try:
        return parse_duration(value, maximum=MAX_DURATION_SECONDS)
    except ValueError:
        return None


def _deadline_message(what: str, deadline: float, max_deadline: float) -> str:
    return (
        f"{what} {format_duration(deadline)} is above global.max_deadline "
        f"{format_duration(max_deadline)}"
    )


def _named_bodies(data: Mapping[str, Any], section: str) -> list[tuple[str, dict[str, Any]]]:
    """The entries of a named section whose body is a mapping (`name: {}` or `name:`)."""
    entries = data.get(section)
    if not isinstance(entries, dict):
        return []
    return [(n, {} if b is None else b) for n, b in entries.items() if isinstance(b, dict | None)]


def _raw_steps(chain_body: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    steps = chain_body.get("steps")
    if not isinstance(steps, dict):
        return {}
    return {n: ({} if b is None else b) for n, b in steps.items() if isinstance(b, dict | None)}


def _check_reserved(data: Mapping[str, Any], report: ProblemReport) -> None:
    def check(body: Mapping[str, Any], loc: Loc) -> None:
        for reserved in RESERVED_FIELDS:
            if reserved in body:
                report.add(
                    (*loc, reserved),
                    f"`{reserved}` is reserved for a later version of runlane",
                    key=True,
                )

    for name, body in _named_bodies(data, "jobs"):
        check(body, ("jobs", name))
    for name, body in _named_bodies(data, "chains"):
        for step, step_body in _raw_steps(body).items():
            check(step_body, ("chains", name, "steps", step))


def _check_param_names(data: Mapping[str, Any], report: ProblemReport) -> None:
    for name, body in _named_bodies(data, "jobs"):
        params = body.get("params")
        if isinstance(params, dict):
            for param in params:
                if not PARAM_NAME_RE.fullmatch(param):
                    report.add(
                        ("jobs", name, "params", param),
                        f"param name {param!r} is not allowed: use lowercase letters, digits and _, "
                        "not starting with a digit",
                        key=True,
                    )


def _check_listeners(data: Mapping[str, Any], report: ProblemReport) -> None:
    """A job that listens for one key twice would be started twice by each event of it."""
    for name, body in _named_bodies(data, "jobs"):
        listeners = body.get("on_event")
        if not isinstance(listeners, list):
            continue
        first: dict[str, int] = {}
        for i, listener in enumerate(listeners):
            key = listener.get("key") if isinstance(listener, dict) else None
            if not isinstance(key, str):
                continue
            if key in first:
                report.add(
                    ("jobs", name, "on_event", i, "key"),
                    f"job {name!r} listens for event key {key!r} twice (on_event[{first[key]}] "
                    f"and on_event[{i}]), so each such event would start it twice: keep one",
                )
            else:
                first[key] = i


def _required_params(body: Mapping[str, Any]) -> list[tuple[str, ParamSpec]]:
    """The params of a raw job that a run must be given (those whose type reads)."""
    params = body.get("params")
    if not isinstance(params, dict):
        return []
    required = []
    for name, text in params.items():
        try:
            spec = ParamSpec.parse(text)
        except ValueError:
            continue  # reported where the params are validated
        if not spec.optional:
            required.append((str(name), spec))
    return required


def _check_triggered_params(data: Mapping[str, Any], report: ProblemReport) -> None:
    """Schedules, event listeners and chain steps start a job with no params (an event does not
    pass its data as params), so a job they start may not require any: every run they asked
    for would be refused."""
    required = {
        name: params
        for name, body in _named_bodies(data, "jobs")
        if (params := _required_params(body))
    }
    for name, body in _named_bodies(data, "jobs"):
        if name not in required:
            continue
        for trigger, why in (
            ("schedules", "its schedules start it with no params"),
            (
                "on_event",
                "its on_event listeners start it with no params (event data is not params)",
            ),
        ):
            if isinstance(body.get(trigger), list) and body[trigger]:
                report.add(
                    ("jobs", name, trigger),
                    f"job {name!r} has {_params_fix(required[name], why)}",
                    key=True,
                )
    for chain, body in _named_bodies(data, "chains"):
        for step, step_body in _raw_steps(body).items():
            job = step_body.get("job", step)
            if not isinstance(job, str) or job not in required:
                continue
            at: Loc = ("chains", chain, "steps", step)
            report.add(
                (*at, "job") if "job" in step_body else at,
                f"step {step!r} of chain {chain!r} runs job {job!r}, which has "
                + _params_fix(required[job], "a chain step starts it with no params"),
                key="job" not in step_body,
            )


def _params_fix(params: list[tuple[str, ParamSpec]], why: str) -> str:
    """`required param 'week' (int), but WHY: make it optional (week: int?)`."""
    names = ", ".join(f"{name!r} ({spec})" for name, spec in params)
    fix = ", ".join(f"{name}: {spec}?" for name, spec in params)
    if len(params) == 1:
        return f"required param {names}, but {why}: make it optional ({fix})"
    return f"required params {names}, but {why}: make them optional ({fix})"


def _check_nested_names(data: Mapping[str, Any], report: ProblemReport) -> None:
    for name, body in _named_bodies(data, "chains"):
        steps = body.get("steps")
        if isinstance(steps, dict):
            for step in steps:
                check_name("step", step, ("chains", name, "steps", step), report)
    g = data.get("global")
    if isinstance(g, dict) and isinstance(g.get("seasons"), dict):
        for season in g["seasons"]:
            check_name("season", season, ("global", "seasons", season), report)


def _step_parents(body: Mapping[str, Any]) -> list[tuple[int, str]]:
    """(index in `after`, step name) for each well-formed `after` entry of a raw step."""
    after = body.get("after")
    if not isinstance(after, list):
        return []
    return [
        (i, dep["step"])
        for i, dep in enumerate(after)
        if isinstance(dep, dict) and isinstance(dep.get("step"), str)
    ]


def _check_chain(
    name: str,
    body: Mapping[str, Any],
    job_names: set[str],
    seasons: set[str] | None,
    report: ProblemReport,
) -> None:
    base: Loc = ("chains", name)
    schedule = body.get("schedule")
    if (
        seasons is not None
        and isinstance(schedule, dict)
        and isinstance(schedule.get("seasons"), list)
    ):
        for i, season in enumerate(schedule["seasons"]):
            if isinstance(season, str) and season not in seasons:
                # One aside: where seasons are defined when there are none, else the hint.
                hint = (
                    did_you_mean(season, seasons)
                    if seasons
                    else ": none are defined under global.seasons"
                )
                report.add(
                    (*base, "schedule", "seasons", i),
                    f"chain {name!r} uses unknown season {season!r}{hint}",
                )
    steps = _raw_steps(body)
    for step_name, step in steps.items():
        loc: Loc = (*base, "steps", step_name)
        job = step.get("job", step_name)
        if isinstance(job, str) and job not in job_names:
            if "job" in step:
                report.add(
                    (*loc, "job"),
                    f"step {step_name!r} of chain {name!r} runs unknown job {job!r}"
                    f"{did_you_mean(job, job_names)}",
                )
            else:
                report.add(
                    loc,
                    f"step {step_name!r} of chain {name!r} runs job {step_name!r}, which is not "
                    f"in the catalog{did_you_mean(step_name, job_names)}; add `job: NAME` to "
                    "the step or define the job",
                    key=True,
                )
        for i, parent in _step_parents(step):
            if parent not in steps:
                report.add(
                    (*loc, "after", i, "step"),
                    f"step {step_name!r} of chain {name!r} waits for unknown step {parent!r}"
                    f"{did_you_mean(parent, set(steps))}",
                )
    parents = {s: [p for _, p in _step_parents(b) if p in steps] for s, b in steps.items()}
    for cycle in find_cycles(parents):
        # Reported at the `after` entry of the cycle's first step that points back into the cycle.
        first, before = cycle[0], cycle[-2]
        index = next(i for i, p in _step_parents(steps[first]) if p == before)
        report.add(
            (*base, "steps", first, "after", index),
            f"chain {name!r} has a dependency cycle: {' → '.join(cycle)}",
        )


def find_cycles(parents: Mapping[str, list[str]]) -> list[list[str]]:
    """Dependency cycles among steps (`parents[s]` are the steps s runs after), each reported
    once, in run order (`a → b`: b runs after a), closed (first == last), starting from the
    earliest step in `parents`' order."""
    order = {step: i for i, step in enumerate(parents)}
    cycles: list[list[str]] = []
    seen: set[frozenset[tuple[str, str]]] = set()
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    # Depth-first with an explicit stack, not recursion: a long chain listed from its last step
    # to its first would otherwise go a frame deeper per step, past Python's recursion limit.
    for root in parents:
        if root in state:
            continue
        state[root] = 1
        path.append(root)
        stack = [iter(parents.get(root, []))]
        while stack:
            parent = next(stack[-1], None)
            if parent is None:
                stack.pop()
                state[path.pop()] = 2
            elif state.get(parent) == 1:
                # path walks child → parent, so the run order is the reverse.
                run_order = list(reversed(path[path.index(parent) :]))
                start = min(range(len(run_order)), key=lambda k: order.get(run_order[k], 0))
                run_order = run_order[start:] + run_order[:start]
                edges = frozenset(zip(run_order, [*run_order[1:], run_order[0]], strict=True))
                if edges not in seen:
                    seen.add(edges)
                    cycles.append([*run_order, run_order[0]])
            elif parent not in state:
                state[parent] = 1
                path.append(parent)
                stack.append(iter(parents.get(parent, [])))
    return cycles
