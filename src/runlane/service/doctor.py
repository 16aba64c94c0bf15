"""`runlane doctor`: checks a person runs when something looks wrong, each with a plain verdict."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from runlane.catalog import Catalog, load_catalog
from runlane.core.durations import format_duration
from runlane.core.runs import Run, RunStatus
from runlane.core.secrets import mask_url
from runlane.errors import CatalogError, RunlaneError, StoreError
from runlane.ports import Heartbeat, QueuePolicy, RunFilter, Store
from runlane.service.catalog_stamp import (
    at_seconds,
    catalog_digest,
    catalog_state,
    changed_message,
    launchers_lacking,
    live_launchers,
)
from runlane.service.config import Settings
from runlane.service.wiring import (
    build_broker_bus,
    cluster_configured,
    cluster_problem,
    rbac_lacks,
    rbac_review,
    slurm_configured,
    slurm_report,
)

Level = Literal["ok", "warning", "error"]

REPAIR_CODES = frozenset({"unknown_job", "corrupt_params"})


@dataclass(frozen=True, slots=True)
class Finding:
    level: Level
    check: str
    message: str
    run_id: str | None = None


@dataclass(frozen=True, slots=True)
class Stuck:
    run_id: str
    job: str
    status: str
    why: str


def iso_utc(value: datetime) -> str:
    """UTC ISO-8601 with a Z, as every JSON output of runlane writes times."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _ago(delta: timedelta) -> str:
    return format_duration(max(0.0, delta.total_seconds()))


async def stuck_runs(
    store: Store, *, waiting_after: timedelta = timedelta(minutes=5)
) -> list[Stuck]:
    """Runs a person should look at: running past their deadline, running with nobody renewing
    the lease, or due in the queue for longer than `waiting_after`."""
    now = await store.now()
    found: list[Stuck] = []
    for run in await store.list_runs(RunFilter(status=RunStatus.RUNNING, limit=100_000)):
        if run.deadline_at is not None and now > run.deadline_at:
            found.append(
                Stuck(
                    run.id, run.job, "running", f"{_ago(now - run.deadline_at)} past its deadline"
                )
            )
        elif run.lease_expires_at is not None and now > run.lease_expires_at:
            found.append(
                Stuck(run.id, run.job, "running", "its launcher stopped renewing the lease")
            )
    for run in await store.list_runs(RunFilter(status=RunStatus.QUEUED, limit=100_000)):
        due = run.not_before or run.queued_at
        if now - due > waiting_after:
            found.append(Stuck(run.id, run.job, "queued", f"due for {_ago(now - due)}"))
    return found


async def diagnose(settings: Settings, store: Store) -> list[Finding]:
    """Every check, in a stable order. Reads only; changes nothing."""
    findings: list[Finding] = []
    try:
        await store.ensure_current()
        findings.append(Finding("ok", "schema", f"schema version {await store.schema_version()}"))
    except StoreError as exc:
        findings.append(Finding("error", "schema", exc.message))
        return findings
    try:
        await store.check_writable()
        findings.append(Finding("ok", "database", "writable"))
    except StoreError as exc:
        findings.append(Finding("error", "database", exc.message))

    catalog: Catalog | None = None
    try:
        catalog = load_catalog(settings.catalog_path)
        findings.append(
            Finding("ok", "catalog", f"{settings.catalog_path}: {len(catalog.jobs)} jobs")
        )
    except CatalogError as exc:
        findings.append(Finding("error", "catalog", exc.message))
        # A file that cannot be read is its own only problem: said once, not twice.
        findings.extend(Finding("error", "catalog", p) for p in exc.problems if p != exc.message)

    now = await store.now()
    launchers = await store.launchers()
    fresh = live_launchers(launchers, now, settings.launcher_stale_after)
    for h in launchers:
        if h not in fresh:
            seen = (
                "never beat"
                if h.beat_at is None
                else f"last seen {_ago(now - h.beat_at)} ago ({iso_utc(h.beat_at)})"
            )
            findings.append(
                Finding("warning", "launchers", f"launcher {h.launcher_id} is stale: {seen}")
            )
    if fresh:
        findings.append(Finding("ok", "launchers", f"{len(fresh)} launcher(s) alive"))
    else:
        findings.append(
            Finding("warning", "launchers", "no launcher is alive: nothing claims runs")
        )
    findings.extend(catalog_findings(fresh, catalog, settings.catalog_path))

    active = [
        run
        for status in (RunStatus.QUEUED, RunStatus.RUNNING)
        for run in await store.list_runs(RunFilter(status=status, limit=100_000))
    ]
    repair = 0
    for run in active:
        reason = None
        level: Level = "error"
        if run.params is None:
            reason = f"stored params are not valid JSON: {run.params_raw[:80]!r}"
        elif catalog is not None and run.job not in catalog.jobs and run.executor != "scope":
            reason = f"job {run.job!r} is not in the catalog"
        elif (
            catalog is not None
            and run.error_code == "unknown_job"
            and run.status is RunStatus.QUEUED  # running now: a launcher that has the job took it
        ):
            # The job is in the file: the launcher that claimed the run ran an older catalog.
            level, reason = _older_catalog(run, fresh, settings.catalog_path)
        elif run.error_code in REPAIR_CODES and run.status is RunStatus.QUEUED:
            reason = run.note or run.error_code
        if reason is not None:
            repair += 1
            findings.append(
                Finding(
                    level,
                    "repair",
                    f"run {run.id} ({run.job}, {run.status.value}): {reason}",
                    run.id,
                )
            )
        if (
            run.status is RunStatus.RUNNING
            and run.deadline_at is not None
            # The launcher's orphan sweep waits as long (RUNLANE_ORPHAN_GRACE).
            and now > run.deadline_at + timedelta(seconds=settings.orphan_grace)
        ):
            findings.append(
                Finding(
                    "warning",
                    "orphans",
                    f"run {run.id} ({run.job}) is running {_ago(now - run.deadline_at)} past its deadline",
                    run.id,
                )
            )
    removed = await removed_chain_findings(store, catalog, fresh) if catalog is not None else []
    findings.extend(removed)
    repair += len(removed)
    if repair == 0:
        findings.append(Finding("ok", "repair", f"{len(active)} active runs, none needs repair"))
    findings.extend(await kubernetes_findings(catalog, settings))
    findings.extend(await slurm_findings(catalog))
    findings.extend(await bus_findings(settings, store, catalog))
    findings.extend(await _alert_findings(store, catalog))
    return findings


async def bus_findings(settings: Settings, store: Store, catalog: Catalog | None) -> list[Finding]:
    """With `RUNLANE_BUS=rabbitmq`: the broker answers and holds runlane's topology with the same
    arguments (docs/bus.md), the dead-letter queue is empty, the outbox is not backing up."""
    if settings.bus != "rabbitmq":
        return [Finding("ok", "bus", "the database is the bus (RUNLANE_BUS=database)")]
    bus = build_broker_bus(None, settings, catalog)
    findings: list[Finding] = []
    try:
        await bus.open()
        depths = await bus.depths()
        policy = await bus.job_runs_policy()
    except RunlaneError as exc:
        return [Finding("error", "bus", exc.message)]
    finally:
        await bus.close()
    findings.append(
        Finding("ok", "bus", f"RabbitMQ at {mask_url(settings.rabbitmq_url)}: topology declared")
    )
    if policy is not None:
        findings.append(policy_finding(policy))
    if depths is not None:
        level: Level = "warning" if depths.job_runs_dlq else "ok"
        findings.append(
            Finding(
                level,
                "bus",
                f"job_runs holds {depths.job_runs} message(s), "
                f"job_runs.dlq {depths.job_runs_dlq} (dead-lettered commands: see docs/bus.md)",
            )
        )
    pending = await store.outbox_pending()
    oldest = await store.outbox_oldest_pending()
    if oldest is not None:
        age = (await store.now()) - oldest
        level = "warning" if age > timedelta(minutes=1) else "ok"
        findings.append(
            Finding(level, "bus", f"outbox: {pending} row(s) unpublished, oldest {_ago(age)} old")
        )
    else:
        findings.append(Finding("ok", "bus", "outbox: nothing waits to be published"))
    return findings


def policy_finding(policy: QueuePolicy) -> Finding:
    """job_runs' effective policy is runlane's (another of higher priority would replace it)."""
    if policy.applied is None:
        # A queue declared seconds ago: the management API's statistics lag (5 s by default).
        return Finding(
            "warning",
            "bus",
            f"job_runs reports no policy yet (runlane's {policy.wanted!r} is set; the "
            "management API's statistics lag a few seconds): run `runlane doctor` again",
        )
    if policy.applied != policy.wanted:
        return Finding(
            "error",
            "bus",
            f"job_runs follows policy {policy.applied!r}, not runlane's {policy.wanted!r}: its "
            "TTL and dead-lettering are not runlane's (a policy of higher priority matches "
            "it); see docs/bus.md#topology",
        )
    d = policy.definition
    return Finding(
        "ok",
        "bus",
        f"job_runs follows policy {policy.wanted!r} (message-ttl {d.get('message-ttl')} ms, "
        f"delivery-limit {d.get('delivery-limit')})",
    )


async def _alert_findings(store: Store, catalog: Catalog | None) -> list[Finding]:
    """Notify targets that keep failing, `${VAR}`s unset here, open incidents (service/alerts)."""
    from runlane.service.alerts.health import alert_health, health_lines

    health = await alert_health(store, catalog)
    return [Finding(level, "alerts", message) for level, message in health_lines(health)]


async def removed_chain_findings(
    store: Store, catalog: Catalog, fresh: list[Heartbeat]
) -> list[Finding]:
    """An error for each running chain run whose chain the catalog file does not define: no
    launcher on this catalog advances it. A live launcher whose heartbeat lists the chain (an
    older catalog) still does; otherwise a launcher ends it `unknown_chain` (when none runs, it
    stays running), and `runlane cancel ID` ends it now."""
    found: list[Finding] = []
    after = None
    while True:
        page = await store.active_chain_runs(after=after, limit=500)
        for run in page:
            if run.chain in catalog.chains:
                continue
            having = [h.launcher_id for h in fresh if run.chain in (h.catalog_chains or ())]
            if having:
                fate = (
                    f"launcher {having[0]} still runs an older catalog that has it and advances "
                    "it until restarted"
                )
            elif fresh:
                fate = "a live launcher ends it `unknown_chain` within a few minutes"
            else:
                fate = "no launcher is running to end it"
            found.append(
                Finding(
                    "error",
                    "repair",
                    f"chain run {run.id} ({run.chain}, running since {at_seconds(run.started_at)}): "
                    f"chain {run.chain!r} is not in the catalog; {fate}; `runlane cancel {run.id}` "
                    "ends it and its unfinished steps now",
                    run.id,
                )
            )
        if len(page) < 500:
            return found
        after = page[-1]


def catalog_findings(fresh: list[Heartbeat], catalog: Catalog | None, path: str) -> list[Finding]:
    """A warning for each live launcher that loaded its catalog before the file last changed."""
    if catalog is None:
        return []
    digest = catalog_digest(catalog)
    return [
        Finding("warning", "launchers", changed_message(h, path))
        for h in fresh
        if catalog_state(h, digest) == "changed"
    ]


def _older_catalog(run: Run, fresh: list[Heartbeat], path: str) -> tuple[Level, str]:
    """Why a run of a job the catalog file defines was kept as `unknown_job`, and what to do:
    an error while no live launcher is known to have the job, a warning once one has it."""
    reason = (
        f"job {run.job!r} is in {path}, but the launcher that claimed the run had loaded an "
        "older catalog without it"
    )
    next_try = f"; its next try is at {at_seconds(run.not_before)}" if run.not_before else ""
    if not fresh:
        return "error", f"{reason}: start `runlane serve` to run it (it starts the run at once)"
    knowing = [h for h in fresh if h.catalog_jobs is not None and run.job in h.catalog_jobs]
    if knowing:
        return "warning", (
            f"{reason}; launcher {knowing[0].launcher_id}, running now, has the job{next_try}"
        )
    lacking = launchers_lacking(run.job, fresh)
    without = (
        f"; running without the job: {', '.join(h.launcher_id for h in lacking)}" if lacking else ""
    )
    return "error", (
        f"{reason}: restart the launcher (`runlane serve`) to apply the catalog (the restarted "
        f"launcher starts the run at once){without}"
    )


async def kubernetes_findings(
    catalog: Catalog | None, settings: Settings | None = None
) -> list[Finding]:
    """What pod jobs will meet, graded as the launcher acts: a broken explicit kubeconfig or a
    refused fallback (pod jobs refused) is an error; no cluster with the inline fallback is ok.
    With a cluster, the RBAC report (SelfSubjectAccessReview per verb the pod executor uses)
    for every namespace the catalog's profiles name: an error only when a required `jobs.batch`
    verb is denied (pod runs are refused), a warning when optional ones are (runs work with
    less) or a review could not be made."""
    problem = cluster_problem()
    if problem is not None:
        return [Finding("error", "kubernetes", f"{problem}: pod jobs are refused")]
    if not cluster_configured():
        if settings is None or settings.pod_fallback != "refuse":
            return [Finding("ok", "kubernetes", "no cluster configured: pod jobs run inline")]
        why = "no cluster configured and RUNLANE_POD_FALLBACK=refuse: pod jobs are refused"
        if catalog is None:
            return [Finding("warning", "kubernetes", why)]
        pod_jobs = sorted(name for name in catalog.jobs if _runs_as_pod(catalog, name))
        if not pod_jobs:
            return [Finding("ok", "kubernetes", f"{why} (the catalog has none)")]
        shown = ", ".join(pod_jobs[:5]) + (", …" if len(pod_jobs) > 5 else "")
        return [Finding("error", "kubernetes", f"{why} ({len(pod_jobs)} in the catalog: {shown})")]
    namespaces: list[str | None] = [None]
    if catalog is not None:
        namespaces += sorted({p.namespace for p in catalog.profiles.values() if p.namespace})
    found: list[Finding] = []
    for ns in namespaces:
        where = ns or "the launcher's namespace"
        try:
            checks = await rbac_review(ns)
        except RunlaneError as exc:
            found.append(Finding("warning", "kubernetes", f"RBAC check in {where}: {exc.message}"))
            continue
        required = [f"{p.verb} {p.label}" for p, ok in checks if p.required and ok is False]
        optional = [p for p, ok in checks if not p.required and ok is False]
        unknown = [f"{p.verb} {p.label}" for p, ok in checks if ok is None]
        lacks = sorted({rbac_lacks(p.label) for p in optional} - {""})
        optional_text = ", ".join(f"{p.verb} {p.label}" for p in optional)
        if required:
            message = (
                f"in {where} the launcher may not: {', '.join(required)} (pod runs are refused)"
            )
            if optional:
                message += f"; nor: {optional_text}"
            found.append(Finding("error", "kubernetes", message))
        elif optional:
            found.append(
                Finding(
                    "warning",
                    "kubernetes",
                    f"in {where} the launcher may not: {optional_text} (pod runs work, with "
                    f"{'; '.join(lacks)})",
                )
            )
        if unknown:
            found.append(
                Finding(
                    "warning",
                    "kubernetes",
                    f"in {where} the API server did not answer the review of: {', '.join(unknown)}",
                )
            )
        if not (required or optional or unknown):
            found.append(Finding("ok", "kubernetes", f"RBAC in {where}: every verb allowed"))
    return found


async def slurm_findings(catalog: Catalog | None) -> list[Finding]:
    """What Slurm jobs will meet: without a Slurm client here they run inline (a warning when
    the catalog has some); with one, the client tools, `scontrol ping` and every partition the
    catalog's Slurm jobs name."""
    jobs: list[str] = []
    partitions: list[str] = []
    for name in catalog.jobs if catalog is not None else ():
        try:
            job = catalog.resolve(name) if catalog is not None else None
        except RunlaneError:
            continue
        if job is None or job.executor != "slurm":
            continue
        jobs.append(name)
        spec = job.profile_spec.slurm if job.profile_spec is not None else None
        if spec is not None and spec.partition:
            partitions.append(spec.partition)
    if not slurm_configured():
        if not jobs:
            return [Finding("ok", "slurm", "no Slurm client configured (the catalog needs none)")]
        shown = ", ".join(sorted(jobs)[:5]) + (", …" if len(jobs) > 5 else "")
        return [
            Finding(
                "warning",
                "slurm",
                "no Slurm client configured here (sbatch and SLURM_CONF or "
                f"/etc/slurm/slurm.conf): Slurm jobs run inline ({shown})",
            )
        ]
    return [Finding(level, "slurm", message) for level, message in await slurm_report(partitions)]


def _runs_as_pod(catalog: Catalog, job: str) -> bool:
    try:
        return catalog.resolve(job).executor == "pod"
    except RunlaneError:
        return False
