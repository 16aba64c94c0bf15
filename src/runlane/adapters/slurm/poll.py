"""One shared poll of a Slurm cluster for every run the launcher supervises there.

Each interval makes ONE `squeue -t all` call (every job slurmctld still holds, which is each
finished job for `MinJobAge` seconds; only fields Slurm fills in, never text a user chose) and wakes the runs whose job changed. A job that is
gone from slurmctld's memory is looked up once in the accounting database (`sacct`, when
`AccountingStorageType` is not `none`) or else in the job-completion log (`jobcomp/filetxt`,
when the launcher can read `JobCompLoc`). A poll that fails is never a final state: the runs
keep their last known state and the next interval tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from runlane.adapters.slurm.commands import (
    POLL_ARGV,
    Answer,
    Runner,
    failure,
    parse_fields,
    parse_jobcomp,
    parse_poll,
    parse_sacct,
)
from runlane.core.slurm_states import SlurmJob
from runlane.errors import ExecutorError

log = structlog.get_logger("runlane.slurm")

CONFIG_REFRESH = 300.0  # seconds between reads of the cluster's accounting/jobcomp settings
SACCT_SINCE = "now-31days"  # how far back a job is looked for by name (sacct's default: today)


@dataclass(slots=True)
class _Watched:
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    job: SlurmJob | None = None
    missing: int = 0  # consecutive successful polls that did not find the job anywhere


@dataclass
class ClusterPoll:
    """The cluster's shared poll; started by the first `watch`, idle while nothing is watched."""

    runner: Runner
    env: Mapping[str, str] | None
    interval: float = 5.0
    calls: int = 0  # the poll's `squeue` calls made (the bench counts them)
    failures: int = 0  # consecutive failed polls
    last_error: str | None = None
    _watched: dict[str, _Watched] = field(default_factory=dict, init=False)
    _task: asyncio.Task[None] | None = field(default=None, init=False)
    _nudge: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _config: dict[str, str] | None = field(default=None, init=False)
    _config_at: float = field(default=-CONFIG_REFRESH, init=False)

    def watch(self, job_id: str, known: SlurmJob | None = None) -> asyncio.Event:
        """Follow `job_id`; the returned event is set whenever its state may have changed."""
        watched = self._watched.get(job_id)
        if watched is None:
            watched = self._watched[job_id] = _Watched(job=known)
        elif known is not None and watched.job is None:
            watched.job = known
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._loop(), name="runlane-slurm-poll"
            )
        return watched.wake

    def unwatch(self, job_id: str) -> None:
        self._watched.pop(job_id, None)

    def job(self, job_id: str) -> SlurmJob | None:
        watched = self._watched.get(job_id)
        return watched.job if watched is not None else None

    def missing(self, job_id: str) -> int:
        watched = self._watched.get(job_id)
        return watched.missing if watched is not None else 0

    def nudge(self) -> None:
        """Poll now instead of at the end of the interval (after a submit or a cancel)."""
        self._nudge.set()

    @property
    def watched_count(self) -> int:
        return len(self._watched)

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        while self._watched:
            self._nudge.clear()
            await self.poll_once()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval):
                    await self._nudge.wait()

    async def poll_once(self) -> None:
        """One poll: every job slurmctld holds, then the completion records of the missing."""
        self.calls += 1
        try:
            answer = await self.runner(POLL_ARGV, self.env, 30.0)
            if answer.returncode != 0:
                raise failure(answer, "squeue")
        except ExecutorError as exc:
            self.failures += 1
            self.last_error = str(exc)
            log.warning("slurm.poll_failed", error=str(exc), failures=self.failures)
            return
        self.failures, self.last_error = 0, None
        jobs = parse_poll(answer.stdout)
        gone = {job_id for job_id in self._watched if job_id not in jobs}
        unknown: set[str] = set()  # forgotten by slurmctld, and the records could not be read
        if gone:
            found = await self._completed(gone)
            if found is None:
                unknown = gone
            else:
                jobs.update(found)
        for job_id, watched in list(self._watched.items()):
            job = jobs.get(job_id)
            if job is None:
                if job_id not in unknown:
                    watched.missing += 1
            else:
                watched.missing = 0
                watched.job = job
            watched.wake.set()

    async def config(self) -> dict[str, str]:
        """`scontrol show config` as a dict (cached; {} when it cannot be read)."""
        now = asyncio.get_running_loop().time()
        if self._config is None or now - self._config_at > CONFIG_REFRESH:
            try:
                answer = await self.runner(["scontrol", "show", "config"], self.env, 30.0)
            except ExecutorError:
                return self._config or {}
            if answer.returncode != 0:
                return self._config or {}
            config: dict[str, str] = {}
            for line in answer.stdout.splitlines():
                key, sep, value = line.partition("=")
                if sep:
                    config[key.strip()] = value.strip()
            self._config, self._config_at = config, now
        return self._config

    async def _completed(self, wanted: set[str]) -> dict[str, SlurmJob] | None:
        """The final states of jobs slurmctld forgot: sacct, or the job-completion log. None
        when the accounting database could not be asked (slurmdbd away): not finding a job
        there is not the same as the database not answering."""
        config = await self.config()
        if _accounting(config):
            try:
                answer = await self._sacct(["-j", ",".join(sorted(wanted))])
            except ExecutorError as exc:
                log.warning("slurm.sacct_failed", error=str(exc))
                return None
            return parse_sacct(answer.stdout)
        if config.get("JobCompType") == "jobcomp/filetxt" and config.get("JobCompLoc"):
            return read_jobcomp(config["JobCompLoc"], wanted)
        return {}

    async def completed_by_name(self, name: str, comment: str) -> SlurmJob | None:
        """The record of the ended job named `name` (with the comment `comment`, where the
        record keeps comments) once slurmctld has forgotten it: in the accounting database
        when the cluster keeps one, else in the job-completion log; None if neither has it. An
        accounting database that does not answer raises (the caller retries later)."""
        config = await self.config()
        if _accounting(config):
            # This user's jobs only, as `SlurmExecutor._find` (a record may keep no comment).
            answer = await self._sacct(
                [f"--name={name}", f"--user={os.getuid()}", f"--starttime={SACCT_SINCE}"]
            )
            found = [
                job
                for job in parse_sacct(answer.stdout).values()
                if job.name == name and job.comment in ("", comment)
            ]
            return found[-1] if found else None
        if config.get("JobCompType") == "jobcomp/filetxt" and config.get("JobCompLoc"):
            return jobcomp_by_name(config["JobCompLoc"], name)
        return None

    async def _sacct(self, select: list[str]) -> Answer:
        answer = await self.runner(
            ["sacct", "-n", "-P", "-X", *select, "-o", "JobID,JobName,State,ExitCode,Comment,End"],
            self.env,
            30.0,
        )
        if answer.returncode != 0:
            raise failure(answer, "sacct")
        return answer


def _accounting(config: Mapping[str, str]) -> bool:
    """Whether the cluster keeps an accounting database (slurmdbd) `sacct` can read."""
    return config.get("AccountingStorageType", "accounting_storage/none") not in (
        "",
        "accounting_storage/none",
    )


def read_jobcomp(path: str, wanted: set[str]) -> dict[str, SlurmJob]:
    """The entries for `wanted` in a jobcomp/filetxt log the launcher can read ({} if not)."""
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return {}
    return parse_jobcomp(lines, wanted)


def jobcomp_by_name(path: str, name: str) -> SlurmJob | None:
    """The last entry of the job named `name` in a jobcomp/filetxt log (None if none)."""
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return None
    found = None
    marker = f" Name={name} "
    for line in lines:
        if marker in line:
            found = line
    if found is None:
        return None
    fields = parse_fields(found)
    job_id = fields.get("JobId")
    return parse_jobcomp([found], {job_id}).get(job_id) if job_id else None
