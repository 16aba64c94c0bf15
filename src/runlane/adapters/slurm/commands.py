"""The Slurm client tools, as argv lists: running them with a time bound, reading their answers,
and sorting their failures into temporary (slurmctld away, a socket timeout) and permanent (an
invalid partition or account, a request the cluster refuses)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from runlane.core.slurm_states import SlurmJob
from runlane.errors import PermanentExecutorError, TemporaryExecutorError

COMMAND_TIMEOUT = 30.0  # seconds for one client call; slurmctld's own MessageTimeout is 10 s
NAME_PREFIX = "rl-"


@dataclass(frozen=True, slots=True)
class Answer:
    """What one client call printed and how it exited."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


# How a call is made: the executor's default runs the process; tests inject faults around it.
Runner = Callable[[Sequence[str], Mapping[str, str] | None, float], Awaitable[Answer]]


async def run_tool(
    argv: Sequence[str], env: Mapping[str, str] | None, limit: float = COMMAND_TIMEOUT
) -> Answer:
    """Run one client tool (no shell), bounded by `limit` seconds; a tool that is missing or does not
    answer in time is a TemporaryExecutorError (the run waits, it is not failed)."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env) if env is not None else None,
        )
    except FileNotFoundError as exc:
        raise TemporaryExecutorError(
            f"the Slurm client tool {argv[0]!r} is not installed on the launcher's machine",
            error_code="slurm_unavailable",
            retry_after=60.0,
        ) from exc
    except OSError as exc:
        raise TemporaryExecutorError(
            f"cannot run {argv[0]}: {exc.strerror}",
            error_code="slurm_unavailable",
            retry_after=10.0,
        ) from exc
    try:
        out, err = await asyncio.wait_for(proc.communicate(), limit)
    except TimeoutError as exc:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise TemporaryExecutorError(
            f"{argv[0]} did not answer within {limit:g}s",
            error_code="slurm_timeout",
            retry_after=5.0,
        ) from exc
    except BaseException:
        # Cancelled (a poll or a start given up, the executor closing): the client tool must
        # not outlive the call that ran it.
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(proc.wait(), 2.0)
        raise
    return Answer(
        tuple(argv),
        proc.returncode if proc.returncode is not None else -1,
        out.decode(errors="replace"),
        err.decode(errors="replace"),
    )


# Answers that mean "try again later": the controller is down, restarting or too busy.
_TEMPORARY = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Connection refused|"
    r"Slurm backup controller in standby|Zero Bytes were transmitted|Communication connection|"
    r"Resource temporarily unavailable|slurm_load_jobs error: Unable to contact|"
    r"Transport endpoint|Protocol authentication error|Munge|Slurmctld is busy|"
    r"Too many pending jobs|Job submission queue full|EAGAIN",
    re.IGNORECASE,
)
_NOT_CONFIGURED = re.compile(
    r"Could not establish a configuration source|Unable to process configuration", re.IGNORECASE
)


def failure(answer: Answer, what: str) -> TemporaryExecutorError | PermanentExecutorError:
    """The error for a client call that exited non-zero: temporary when slurmctld could not be
    reached, else permanent with Slurm's own words (an invalid partition, an account not
    allowed, a request no node can meet)."""
    text = " ".join(line.strip() for line in answer.stderr.strip().splitlines()[-3:])
    text = text or answer.stdout.strip() or f"exit {answer.returncode}"
    if _TEMPORARY.search(answer.stderr):
        return TemporaryExecutorError(
            f"{what}: slurmctld is unreachable right now ({text})",
            error_code="slurm_unavailable",
            retry_after=10.0,
        )
    if _NOT_CONFIGURED.search(answer.stderr):
        return PermanentExecutorError(
            f"{what}: the Slurm client is not configured on the launcher's machine (set "
            f"SLURM_CONF or install /etc/slurm/slurm.conf): {text}",
            error_code="config_error",
        )
    return PermanentExecutorError(f"{what}: {text}", error_code="slurm_refused")


def job_name(job: str, run_id: str, attempt: int) -> str:
    """The deterministic Slurm job name of one attempt: `rl-<job>-<hash>-a<attempt>`, a slug of
    the job (for people reading squeue) and a hash that pins run and attempt."""
    digest = hashlib.sha256(f"{job}|{run_id}|{attempt}".encode()).hexdigest()[:12]
    slug = re.sub(r"[^A-Za-z0-9_.]+", "-", job).strip("-")[:40] or "job"
    return f"{NAME_PREFIX}{slug}-{digest}-a{attempt}"


def job_comment(run_id: str, attempt: int) -> str:
    """The comment that says a job belongs to this run and attempt (checked before adopting)."""
    return f"runlane:run={run_id}:attempt={attempt}"


# `Key=value` fields of `scontrol -o show job`; a value may hold spaces (a path), so a field
# starts only where a word followed by `=` does.
_FIELD = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=")


def parse_fields(line: str) -> dict[str, str]:
    """One `scontrol -o` record (or a jobcomp/filetxt line) as a dict."""
    fields: dict[str, str] = {}
    matches = list(_FIELD.finditer(line))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        fields[m.group(1)] = line[m.end() : end].strip()
    return fields


def job_of(fields: Mapping[str, str]) -> SlurmJob | None:
    """A SlurmJob from `scontrol -o show job` fields (or the job-completion log's)."""
    job_id = fields.get("JobId")
    if not job_id:
        return None
    return SlurmJob(
        job_id=job_id,
        name=fields.get("JobName") or fields.get("Name") or "",
        state=fields.get("JobState", "UNKNOWN"),
        reason=fields.get("Reason", "None"),
        exit_code=fields.get("ExitCode", "0:0"),
        comment=fields.get("Comment", ""),
        std_out=fields.get("StdOut", ""),
        submit_time=fields.get("SubmitTime", ""),
        end_time=fields.get("EndTime", ""),
    )


def parse_show_job(text: str) -> dict[str, SlurmJob]:
    """Every job of `scontrol -o show job`, by job id."""
    jobs: dict[str, SlurmJob] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        job = job_of(parse_fields(line))
        if job is not None:
            jobs[job.job_id] = job
    return jobs


# The shared poll's query: every job slurmctld holds, as fields Slurm itself fills in. Never a
# job's name, comment, command or paths: any user of the cluster chooses those for their own
# jobs, and they may hold newlines and whole `JobId=… JobState=…` records (scontrol prints them
# as they are), which a poll reading every job would take for another job's state.
POLL_ARGV = (
    "squeue", "-h", "-t", "all",
    "-O", "JobID:|,State:|,Reason:|,exit_code:|,SubmitTime:|,EndTime:|",
)  # fmt: skip


def exit_code_of(wait_status: str) -> str:
    """squeue's `exit_code` (a wait status: 768, 9) as scontrol's `<exit status>:<signal>`."""
    try:
        status = int(wait_status)
    except ValueError:
        return "0:0"
    signum = status & 0x7F
    return f"0:{signum}" if signum else f"{(status >> 8) & 0xFF}:0"


def parse_poll(text: str) -> dict[str, SlurmJob]:
    """The lines of `POLL_ARGV` (`<id>|<state>|<reason>|<wait status>|<submit time>|<end
    time>|`), by job id."""
    jobs: dict[str, SlurmJob] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if parts and parts[-1] == "":
            parts.pop()
        if len(parts) < 6 or not parts[0].isdigit():
            continue
        jobs[parts[0]] = SlurmJob(
            job_id=parts[0],
            name="",
            state=parts[1],
            reason="|".join(parts[2:-3]) or "None",
            exit_code=exit_code_of(parts[-3]),
            submit_time=parts[-2],
            end_time=parts[-1],
        )
    return jobs


def ended_at(job: SlurmJob) -> datetime | None:
    """When a job that has ended did (its EndTime, the client tools' local time), or None when
    unknown or not yet past (a running job's EndTime is when its time limit runs out)."""
    try:
        at = datetime.fromisoformat(job.end_time).astimezone()
    except ValueError:
        return None
    return at if at <= datetime.now(at.tzinfo) else None


def submitted_at(job: SlurmJob) -> float | None:
    """The job's SubmitTime as a Unix time (the client tools print the local time), or None."""
    try:
        return datetime.fromisoformat(job.submit_time).timestamp()
    except ValueError:
        return None


def parse_sacct(text: str) -> dict[str, SlurmJob]:
    """`sacct -n -P -X -o JobID,JobName,State,ExitCode,Comment,End` lines, by job id."""
    jobs: dict[str, SlurmJob] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 4 or not parts[0]:
            continue
        job_id = parts[0]
        jobs[job_id] = SlurmJob(
            job_id=job_id,
            name=parts[1],
            state=parts[2],
            exit_code=parts[3],
            comment=parts[4] if len(parts) > 4 else "",
            end_time=parts[5] if len(parts) > 5 else "",
        )
    return jobs


_JOBCOMP_ID = re.compile(r"^JobId=(\d+) ")


def parse_jobcomp(lines: Sequence[str], wanted: set[str]) -> dict[str, SlurmJob]:
    """The entries of a `jobcomp/filetxt` log for the job ids in `wanted` (the last wins)."""
    jobs: dict[str, SlurmJob] = {}
    for line in lines:
        m = _JOBCOMP_ID.match(line)
        if m is None or m.group(1) not in wanted:
            continue
        job = job_of(parse_fields(line))
        if job is not None:
            jobs[job.job_id] = job
    return jobs
