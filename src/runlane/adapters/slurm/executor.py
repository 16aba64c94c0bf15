"""The Slurm executor (`executor: slurm`): one run attempt = one Slurm batch job.

- Submit: `sbatch --parsable --no-requeue --job-name=<deterministic> --comment=<run+attempt>
  --time=<deadline + kill grace, rounded up to a minute> --output=<per-run file> …  <script>
  <argv…>`. The batch script is a constant runlane writes once, `exec "$@"`: the job's command
  travels as sbatch's own script arguments (an argv list, never text a shell parses), the run's
  environment as sbatch's environment (`--export=ALL`, so params are never interpolated into an
  option either). Params too large for the environment go to a private directory beside the
  log, as inline runs do (core.envsplit).
- Idempotent start: before submitting, and after an sbatch that failed to answer, the name is
  looked up (`squeue --name … -t all`); a job of that name is adopted only if its comment names
  the same run and attempt (else `name_collision`). Never two jobs for one attempt.
- Tracking: one shared poll per cluster (poll.py), never a call per run; the state classifier
  is pure (core.slurm_states). Pending past `start_timeout` → the pending reason is saved, the
  job cancelled, the run `failure`/`start_timeout`; a pending reason waiting cannot cure
  (PartitionConfig, BadConstraints, …) fails the run at once with that reason.
- The deadline: Slurm's own limit is a minute-rounded backstop; the launcher cancels the job at
  the run's exact deadline and the run ends `timeout`/`deadline`.
- `cancel` is `scancel` (Slurm sends SIGTERM, then SIGKILL after the cluster's `KillWait`); the
  run ends `cancelled` once Slurm says CANCELLED. Closing the executor (launcher shutdown)
  cancels nothing: the next launcher reattaches by name.
- Logs: the job writes its output to `<log_dir>/<run_id>.<attempt>.log`, which the launcher
  reads (tail, follow): the launcher and the compute nodes must share that file system
  (docs/slurm.md says what happens when they do not).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import shutil
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from runlane.adapters.files.logfile import follow_log, read_log_tail
from runlane.adapters.files.params import write_params_dir
from runlane.adapters.slurm.commands import (
    Answer,
    Runner,
    ended_at,
    failure,
    job_comment,
    job_name,
    run_tool,
    submitted_at,
)
from runlane.adapters.slurm.poll import ClusterPoll
from runlane.core.envsplit import split_env, without_run_context
from runlane.core.runs import EndReason, Outcome, RunStatus
from runlane.core.slurm_states import SlurmJob, SlurmVerdict, classify
from runlane.errors import ExecutorError, PermanentExecutorError, TemporaryExecutorError
from runlane.ports import Execution, ExecutionEvent, ExecutionSpec

log = structlog.get_logger("runlane.slurm")

BATCH_SCRIPT = (
    '#!/bin/sh\n# runlane: the job\'s argv arrives as "$@"; nothing is parsed.\nexec "$@"\n'
)
NOTE_MAX_CHARS = 4096
LOST_AFTER_POLLS = 3  # successful polls that must miss a job before it counts as lost

# Profile/job `slurm` fields → sbatch options (catalog.models.SlurmSpec validates them).
OPTION_OF = {
    "partition": "--partition",
    "account": "--account",
    "qos": "--qos",
    "cpus": "--cpus-per-task",
    "memory": "--mem",
    "gres": "--gres",
    "nodes": "--nodes",
    "constraint": "--constraint",
    "workdir": "--chdir",
}


@dataclass(slots=True)
class _Run:
    """One supervised Slurm job (`Execution.handle`)."""

    spec: ExecutionSpec
    name: str
    job_id: str
    log_path: str
    wake: asyncio.Event
    deadline_at: float  # loop time of the run's deadline
    params_dir: str | None = None
    cancel_requested: bool = False
    cancel_sent: bool = False
    cancel_until: float = 0.0
    deadline_enforced: bool = False
    outcome: Outcome | None = None
    # Taken over (or adopted): the job may have waited long before this launcher saw it, so
    # its start timeout counts from its SubmitTime (`_pending_since`).
    reattached: bool = False


@dataclass
class SlurmExecutor:
    """Runs each attempt as a Slurm batch job. `slurm_env` is added to the client tools'
    environment (e.g. SLURM_CONF); `runner` makes the client calls (tests inject faults)."""

    log_dir: str | Path
    start_timeout: float = 600.0
    poll_interval: float = 5.0
    cancel_wait: float = 60.0  # after scancel, how long Slurm has to say CANCELLED
    slurm_env: Mapping[str, str] | None = None
    runner: Runner = run_tool
    name: str = "slurm"
    _runs: dict[tuple[str, int], _Run] = field(default_factory=dict, init=False)
    _poll: ClusterPoll | None = field(default=None, init=False)
    _script: str | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.log_dir = Path(self.log_dir).absolute()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._base_env = {**os.environ, **(self.slurm_env or {})}
        # What each job starts from (--export=ALL): the same, less what describes a run.
        self._job_env = without_run_context(self._base_env)

    # ------------------------------------------------------------------ plumbing

    @property
    def poll(self) -> ClusterPoll:
        if self._poll is None:
            self._poll = ClusterPoll(self.runner, self._base_env, interval=self.poll_interval)
        return self._poll

    async def aclose(self) -> None:
        """Stop polling. Slurm jobs are left running on purpose: the next launcher reattaches."""
        if self._poll is not None:
            await self._poll.aclose()

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()

    async def _call(self, argv: Sequence[str]) -> Answer:
        return await self.runner(argv, self._base_env, 30.0)

    def log_path(self, run_id: str, attempt: int) -> Path:
        return Path(self.log_dir) / f"{run_id}.{attempt}.log"

    def _batch_script(self) -> str:
        if self._script is None:
            path = Path(self.log_dir) / ".runlane-slurm-batch.sh"
            if not path.exists() or path.read_text() != BATCH_SCRIPT:
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(BATCH_SCRIPT)
                tmp.chmod(0o755)
                tmp.replace(path)
            self._script = str(path)
        return self._script

    # ------------------------------------------------------------------ the Executor port

    async def start(self, spec: ExecutionSpec) -> Execution:
        known = self._runs.get((spec.run_id, spec.attempt))
        if known is not None:
            return self._execution(known)
        if not spec.command:
            raise PermanentExecutorError("the job has an empty command", error_code="invalid_spec")
        if "/" in spec.run_id or spec.run_id.startswith("."):
            raise PermanentExecutorError(
                f"run id {spec.run_id!r} cannot name a log file", error_code="invalid_spec"
            )
        name = job_name(spec.job, spec.run_id, spec.attempt)
        found = await self._find(spec, name)
        if found is not None:
            log.info("slurm.adopted", run_id=spec.run_id, job_id=found)
            run = self._track(spec, name, found, self._params_dir(spec))
            run.reattached = True
            return self._execution(run)
        argv, env, params_dir = self._submission(spec, name)
        try:
            answer = await self.runner(argv, env, 30.0)
            if answer.returncode != 0:
                raise failure(answer, "sbatch")
        except TemporaryExecutorError:
            # The job may have been submitted and only the answer lost: look before retrying.
            found = await self._find(spec, name)
            if found is None:
                _remove(params_dir)
                raise
            log.info("slurm.adopted_after_lost_answer", run_id=spec.run_id, job_id=found)
            return self._execution(self._track(spec, name, found, params_dir))
        except BaseException:
            _remove(params_dir)
            raise
        job_id = answer.stdout.strip().split(";")[0]
        if not job_id.isdigit():
            _remove(params_dir)
            raise PermanentExecutorError(
                f"sbatch answered {answer.stdout.strip()!r}, not a job id", error_code="slurm_error"
            )
        log.debug("slurm.submitted", run_id=spec.run_id, job_id=job_id, name=name)
        return self._execution(self._track(spec, name, job_id, params_dir))

    async def reattach(self, spec: ExecutionSpec) -> Execution | None:
        """The run's job, found by its deterministic name in slurmctld (or, once slurmctld has
        forgotten it, in the accounting database or the job-completion log). None of either raises PermanentExecutorError
        (`deleted_externally`): a Slurm job does not end with its launcher."""
        known = self._runs.get((spec.run_id, spec.attempt))
        if known is not None:
            return self._execution(known)
        name = job_name(spec.job, spec.run_id, spec.attempt)
        found = await self._find(spec, name)
        if found is not None:
            log.info("slurm.reattached", run_id=spec.run_id, job_id=found)
            run = self._track(spec, name, found, self._params_dir(spec))
            run.reattached = True
            return self._execution(run)
        ended = await self.poll.completed_by_name(name, job_comment(spec.run_id, spec.attempt))
        if ended is not None:
            return self._execution(
                self._track(spec, name, ended.job_id, self._params_dir(spec), known=ended)
            )
        raise PermanentExecutorError(
            f"no Slurm job named {name} is known to the cluster: it never was submitted, or "
            "was purged while no launcher watched it; the run's outcome is unknown",
            error_code="deleted_externally",
        )

    async def events(self, execution: Execution) -> AsyncIterator[ExecutionEvent]:
        run = _run_of(execution)
        if run.outcome is not None:
            yield ExecutionEvent("finished", run.outcome)
            return
        poll = self.poll
        announced: str | None = None
        pending_since: float | None = None
        try:
            while True:
                run.wake.clear()
                now = self._now()
                wake_at = run.deadline_at if not run.deadline_enforced else run.cancel_until
                job = poll.job(run.job_id)
                verdict = (
                    classify(
                        job,
                        cancel_requested=run.cancel_requested,
                        deadline_enforced=run.deadline_enforced,
                    )
                    if job is not None
                    else SlurmVerdict("pending")
                )
                if verdict.phase == "final":
                    assert job is not None
                    # With when the job ended: one that ended while no launcher watched is
                    # recorded as ending then, not when this launcher saw it.
                    yield ExecutionEvent("finished", self._finish(run, verdict, job), ended_at(job))
                    return
                if job is None and poll.missing(run.job_id) >= LOST_AFTER_POLLS:
                    yield ExecutionEvent("finished", self._lost(run))
                    return
                if run.cancel_requested or run.deadline_enforced:
                    if not run.cancel_sent:
                        await self._scancel(run)
                    if now >= run.cancel_until:
                        yield ExecutionEvent("finished", self._unconfirmed_cancel(run))
                        return
                    wake_at = run.cancel_until
                elif now >= run.deadline_at:
                    run.deadline_enforced = True
                    run.cancel_until = now + run.spec.kill_grace_seconds + self.cancel_wait
                    await self._scancel(run)
                    continue
                elif verdict.phase == "running":
                    pending_since = None
                    if announced != "running":
                        announced = "running"
                        yield ExecutionEvent("running")
                else:
                    if announced is None:
                        announced = "pending"
                        yield ExecutionEvent("pending")
                    if pending_since is None and (job is not None or not run.reattached):
                        pending_since = self._pending_since(run, job, now)
                    if job is not None and verdict.hopeless:
                        yield ExecutionEvent(
                            "finished",
                            await self._give_up(
                                run,
                                EndReason.START_FAILED,
                                error_code="slurm_unsatisfiable",
                                note=f"Slurm cannot run the job as requested (pending reason "
                                f"{verdict.reason}); the job was cancelled",
                            ),
                        )
                        return
                    if pending_since is not None and now - pending_since >= self.start_timeout:
                        yield ExecutionEvent(
                            "finished",
                            await self._give_up(
                                run,
                                EndReason.START_TIMEOUT,
                                error_code="start_timeout",
                                note=f"still pending after start_timeout ({self.start_timeout:g}s), "
                                f"pending reason {verdict.reason or 'None'}; the job was "
                                "cancelled",
                            ),
                        )
                        return
                    if pending_since is not None:
                        wake_at = min(wake_at, pending_since + self.start_timeout)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.0, wake_at - self._now())):
                        await run.wake.wait()
        finally:
            if run.outcome is not None:
                self._forget(run)

    def prepare(self) -> None:
        """Nothing to start ahead: each submission is a command of its own."""

    def stop_following(self, execution: Execution) -> None:
        """Stop following the job (it is left as it is): out of the shared poll. Its spilled
        params stay: a job still pending reads them when it starts."""
        run = _run_of(execution)
        key = (run.spec.run_id, run.spec.attempt)
        if self._runs.get(key) is run:
            del self._runs[key]
            self.poll.unwatch(run.job_id)

    async def cancel(self, execution: Execution, *, grace: float) -> None:
        """`scancel` the job (Slurm: SIGTERM, SIGKILL after `KillWait`); `events` ends the run
        `cancelled` once Slurm says CANCELLED. Idempotent; an ended run is left alone."""
        run = _run_of(execution)
        if run.outcome is not None or run.cancel_requested:
            return
        run.cancel_requested = True
        run.cancel_until = self._now() + max(grace, 0.0) + self.cancel_wait
        await self._scancel(run)
        run.wake.set()

    async def logs(self, execution: Execution, *, tail_bytes: int = 65536) -> str:
        return read_log_tail(_run_of(execution).log_path, tail_bytes)

    async def follow_logs(self, execution: Execution) -> AsyncIterator[str]:
        """The job's output file as it grows, until the run has ended (`logs --follow`)."""
        run = _run_of(execution)

        async def ended() -> bool:
            return run.outcome is not None

        async for text in follow_log(run.log_path, stop=ended):
            yield text

    # ------------------------------------------------------------------ helpers

    def _params_dir(self, spec: ExecutionSpec) -> str:
        """Where the run's params go when they do not fit the environment (one place, so that
        a launcher that adopts or takes over the job removes them when it ends)."""
        return f"{self.log_path(spec.run_id, spec.attempt).with_suffix('')}.params"

    def _submission(self, spec: ExecutionSpec, name: str) -> tuple[list[str], dict[str, str], str]:
        """sbatch's argv and environment for `spec`, and the params directory (written now
        when the params do not fit the environment)."""
        params_dir = self._params_dir(spec)
        run_env, spilled = split_env(spec.env, params_dir)
        if spilled:
            write_params_dir(Path(params_dir), spilled)
        minutes = max(
            1, math.ceil((max(spec.deadline_seconds, 1.0) + spec.kill_grace_seconds) / 60)
        )
        argv = [
            "sbatch",
            "--parsable",
            "--no-requeue",
            f"--job-name={name}",
            f"--comment={job_comment(spec.run_id, spec.attempt)}",
            f"--time={minutes}",
            f"--output={sbatch_literal(str(self.log_path(spec.run_id, spec.attempt)))}",
            "--open-mode=truncate",
            "--export=ALL",
        ]
        argv += slurm_options(spec.profile)
        argv += [self._batch_script(), *spec.command]
        return argv, {**self._job_env, **run_env}, params_dir

    async def _find(self, spec: ExecutionSpec, name: str) -> str | None:
        """The id of this attempt's job by its name, or None; a job of that name that is not
        this run's is a `name_collision`. Only this user's jobs (the launcher submits as
        itself): another user of the cluster sees our jobs' names and comments and could
        give a job of their own both, to have it adopted as this run."""
        answer = await self._call(
            ["squeue", f"--name={name}", f"--user={os.getuid()}", "-h", "-t", "all", "-o", "%i|%k"]
        )
        if answer.returncode != 0:
            raise failure(answer, "squeue")
        ours = job_comment(spec.run_id, spec.attempt)
        others = []
        for line in answer.stdout.splitlines():
            job_id, _, comment = line.strip().partition("|")
            if not job_id:
                continue
            if comment == ours:
                return job_id
            others.append(job_id)
        if others:
            raise PermanentExecutorError(
                f"Slurm job {others[0]} is named {name} but does not belong to this run and "
                "attempt; cancel it or check what made it",
                error_code="name_collision",
            )
        return None

    def _track(
        self,
        spec: ExecutionSpec,
        name: str,
        job_id: str,
        params_dir: str | None = None,
        known: SlurmJob | None = None,
    ) -> _Run:
        wake = self.poll.watch(job_id, known)
        run = _Run(
            spec=spec,
            name=name,
            job_id=job_id,
            log_path=str(self.log_path(spec.run_id, spec.attempt)),
            wake=wake,
            deadline_at=self._now() + max(spec.deadline_seconds, 0.0),
            params_dir=params_dir if params_dir and Path(params_dir).exists() else None,
        )
        self._runs[(spec.run_id, spec.attempt)] = run
        self.poll.nudge()
        return run

    def _forget(self, run: _Run) -> None:
        key = (run.spec.run_id, run.spec.attempt)
        if self._runs.get(key) is run:
            del self._runs[key]
        self.poll.unwatch(run.job_id)
        _remove(run.params_dir)

    @staticmethod
    def _execution(run: _Run) -> Execution:
        return Execution(run.spec.run_id, run.spec.attempt, run.job_id, handle=run)

    async def _scancel(self, run: _Run) -> None:
        """Ask Slurm to cancel the job; a failed call is retried on the next wake-up."""
        try:
            answer = await self._call(["scancel", run.job_id])
        except ExecutorError as exc:
            log.warning("slurm.scancel_failed", job_id=run.job_id, error=str(exc))
            return
        if answer.returncode != 0 and "already completing or completed" not in answer.stderr:
            log.warning("slurm.scancel_failed", job_id=run.job_id, error=answer.stderr.strip())
            if "Invalid job id" not in answer.stderr:
                return
        run.cancel_sent = True
        self.poll.nudge()

    def _pending_since(self, run: _Run, job: SlurmJob | None, now: float) -> float:
        """When (loop time) a pending run's start timeout counts from. A job this launcher
        submitted: now, when it first sees it pending. A job taken over or adopted: its
        SubmitTime, so a launcher restarted every few minutes still times out a job that never
        starts. Never later than now, never more than the start timeout back."""
        submitted = submitted_at(job) if run.reattached and job is not None else None
        if submitted is None:
            return now
        return now - min(max(time.time() - submitted, 0.0), self.start_timeout)

    def _tail(self, run: _Run) -> str | None:
        return read_log_tail(run.log_path) or None

    def _finish(self, run: _Run, verdict: SlurmVerdict, job: SlurmJob) -> Outcome:
        assert verdict.status is not None
        assert verdict.end_reason is not None
        run.outcome = Outcome(
            verdict.status,
            verdict.end_reason,
            exit_code=verdict.exit_code,
            error_code=verdict.error_code,
            log_tail=self._tail(run),
            note=verdict.note[:NOTE_MAX_CHARS] if verdict.note else None,
            retryable=verdict.end_reason != EndReason.START_FAILED,
        )
        log.debug("slurm.finished", run_id=run.spec.run_id, job_id=job.job_id, state=job.state)
        return run.outcome

    async def _give_up(self, run: _Run, end_reason: str, *, error_code: str, note: str) -> Outcome:
        await self._scancel(run)
        run.outcome = Outcome(
            RunStatus.FAILURE,
            end_reason,
            error_code=error_code,
            log_tail=self._tail(run),
            note=note,
            retryable=error_code == "start_timeout",
        )
        return run.outcome

    def _lost(self, run: _Run) -> Outcome:
        run.outcome = Outcome(
            RunStatus.FAILURE,
            EndReason.ORPHANED,
            error_code="slurm_job_lost",
            log_tail=self._tail(run),
            note=f"Slurm job {run.job_id} vanished: slurmctld no longer knows it and no "
            "completion record names it (purged, or the controller lost its state)",
        )
        return run.outcome

    def _unconfirmed_cancel(self, run: _Run) -> Outcome:
        waited = f"Slurm did not report job {run.job_id} ended within {self.cancel_wait:g}s"
        if run.deadline_enforced:
            run.outcome = Outcome(
                RunStatus.TIMEOUT,
                EndReason.DEADLINE,
                error_code="deadline",
                log_tail=self._tail(run),
                note=f"cancelled at the run's deadline; {waited}",
            )
        else:
            run.outcome = Outcome(
                RunStatus.CANCELLED,
                EndReason.CANCELLED,
                log_tail=self._tail(run),
                note=f"cancelled on request; {waited}",
            )
        return run.outcome


def slurm_options(profile: Mapping[str, Any] | None) -> list[str]:
    """The sbatch options a profile's (or job's) `slurm` section asks for."""
    section = (profile or {}).get("slurm") or {}
    options = []
    for key, option in OPTION_OF.items():
        value = section.get(key)
        if value is not None and value != "":
            options.append(f"{option}={value}")
    options += [str(arg) for arg in section.get("extra_args") or ()]
    return options


def _run_of(execution: Execution) -> _Run:
    run = execution.handle
    if not isinstance(run, _Run):
        raise PermanentExecutorError(
            f"run {execution.run_id} was not started by the Slurm executor",
            error_code="invalid_spec",
        )
    return run


def _remove(path: str | None) -> None:
    if path:
        shutil.rmtree(path, ignore_errors=True)


def sbatch_literal(path: str) -> str:
    """`path` as sbatch's --output takes it literally: sbatch expands `%j`, `%x`, `%%`… in a
    file name (a log directory named `100%jobs` became `100<job id>obs`, and the launcher read
    an empty log), unless the name holds a backslash, which turns the expansion off."""
    return path if "\\" in path else path.replace("%", "%%")
