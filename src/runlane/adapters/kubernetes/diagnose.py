"""What a Kubernetes Job and its pods say about a run: queued, pending (and why), running, or
ended — and if it ended, how, as a stable `error_code`.

Pure: it reads the JSON objects the API returns (dicts) and nothing else. The facts it relies on
(docs/kubernetes.md has the table):
- condition `status` is the *string* "True"; `"False"` is truthy in Python and means no;
- Kubernetes ≥ 1.31 adds `SuccessCriteriaMet` / `FailureTarget` first and `Complete` / `Failed`
  once the pods are gone — either one ends the run, with the same reason;
- with `restartPolicy: Never` and `backoffLimit: 0` a crash is a Failed pod whose container
  terminated with an exit code; there is no CrashLoopBackOff;
- ImagePullBackOff never fails a Job by itself: it is a *pending* reason, which the executor's
  start timeout turns into a failure. `InvalidImageName` never resolves, so it fails at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from runlane.core.runs import EndReason, Outcome, RunStatus

JsonObj = Mapping[str, Any]
Phase = Literal["queued", "pending", "running", "succeeded", "failed"]

# Pending reasons (container `waiting.reason`) → error code. Absent: normal start-up steps.
WAITING_CODES: Mapping[str, str] = {
    "ErrImagePull": "image_pull",
    "ImagePullBackOff": "image_pull",
    "ErrImageNeverPull": "image_pull",
    "RegistryUnavailable": "image_pull",
    "SignatureValidationFailed": "image_pull",
    "InvalidImageName": "invalid_image",
    "CreateContainerConfigError": "config_error",
    "CreateContainerError": "start_error",
    "RunContainerError": "start_error",
    "PreStartHookError": "start_error",
}
# Pending reasons that never resolve by waiting: the run fails at once.
FAIL_NOW_REASONS: frozenset[str] = frozenset({"InvalidImageName"})
# Terminated reasons that mean the container never ran the command.
START_FAILURE_REASONS: frozenset[str] = frozenset({"ContainerCannotRun", "StartError"})
# Codes for runs that will fail the same way again: not worth a retry.
NOT_RETRYABLE_CODES: frozenset[str] = frozenset({"invalid_image"})


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """The state of one run's Job. `error_code` is also set while pending (the reason it waits)."""

    phase: Phase
    status: RunStatus | None = None  # set when the phase is final
    end_reason: str | None = None
    error_code: str | None = None
    exit_code: int | None = None
    reason: str | None = None  # the Kubernetes word: ImagePullBackOff, DeadlineExceeded, …
    message: str | None = None
    fail_now: bool = False  # a pending reason that will never resolve

    @property
    def final(self) -> bool:
        return self.phase in ("succeeded", "failed")

    def summary(self) -> str:
        """One line for a person: `image_pull (ImagePullBackOff: Back-off pulling image "x")`."""
        head = self.error_code or self.phase
        detail = ": ".join(p for p in (self.reason, self.message) if p)
        return f"{head} ({detail})" if detail else head

    def outcome(self, *, log_tail: str | None = None, note: str | None = None) -> Outcome:
        """The run's outcome; only for a final diagnosis."""
        if self.status is None or self.end_reason is None:
            raise ValueError(f"a {self.phase} Job has no outcome yet")
        return Outcome(
            self.status,
            self.end_reason,
            exit_code=self.exit_code,
            error_code=self.error_code,
            log_tail=log_tail,
            note=note,
            retryable=self.error_code not in NOT_RETRYABLE_CODES,
        )


def true_condition(obj: JsonObj | None, kind: str) -> JsonObj | None:
    """The condition of type `kind` whose status is the string "True", if any."""
    if not obj:
        return None
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("type") == kind and cond.get("status") == "True":
            return cond  # type: ignore[no-any-return]
    return None


def ended_at(job: JsonObj | None, pods: Sequence[JsonObj]) -> datetime | None:
    """When a finished Job ended, by the cluster's clock (to the second): its `completionTime`
    (set on success), else the time of its final condition, else the latest `finishedAt` of its
    newest pod's containers. None when none of them says."""
    status = (job or {}).get("status") or {}
    candidates: list[Any] = [status.get("completionTime")]
    for kind in ("Complete", "SuccessCriteriaMet", "Failed", "FailureTarget"):
        cond = true_condition(job, kind)
        if cond is not None:
            candidates.append(cond.get("lastTransitionTime"))
    for stamp in candidates:
        when = _rfc3339(stamp)
        if when is not None:
            return when
    newest = _newest_first(pods)
    if newest:
        finished = [
            when
            for state in _container_states(newest[0])
            if (when := _rfc3339((state.get("terminated") or {}).get("finishedAt"))) is not None
        ]
        if finished:
            return max(finished)
    return None


def waiting_since(job: JsonObj | None, pods: Sequence[JsonObj]) -> datetime | None:
    """Since when a pending run has waited to start, by the cluster's clock: its newest pod's
    `creationTimestamp`, else its Job's `startTime` (set again when a suspended Job resumes),
    else the Job's `creationTimestamp`. None when none of them says."""
    newest = _newest_first(pods)
    stamps: list[Any] = (
        [(newest[0].get("metadata") or {}).get("creationTimestamp")] if newest else []
    )
    stamps.append(((job or {}).get("status") or {}).get("startTime"))
    stamps.append(((job or {}).get("metadata") or {}).get("creationTimestamp"))
    for stamp in stamps:
        when = _rfc3339(stamp)
        if when is not None:
            return when
    return None


def _rfc3339(value: object) -> datetime | None:
    """A Kubernetes time (`2024-05-01T12:00:00Z`, fractions allowed) as an aware UTC datetime."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed.astimezone(UTC) if parsed.tzinfo is not None else None


def is_suspended(job: JsonObj) -> bool:
    """Suspended (Kueue holds it, or `spec.suspend`): queued, not failing to start."""
    if (job.get("spec") or {}).get("suspend") is True:
        return True
    return true_condition(job, "Suspended") is not None


def diagnose(job: JsonObj, pods: Iterable[JsonObj] = ()) -> Diagnosis:
    """The run's state from its Job and the pods the Job made (any order)."""
    ordered = _newest_first(pods)
    done = true_condition(job, "Complete") or true_condition(job, "SuccessCriteriaMet")
    if done is not None:
        return Diagnosis(
            "succeeded",
            RunStatus.SUCCESS,
            EndReason.EXIT,
            exit_code=0,
            reason=done.get("reason"),
            message=done.get("message"),
        )
    failed = true_condition(job, "Failed") or true_condition(job, "FailureTarget")
    if failed is not None:
        return _diagnose_failure(failed, ordered)
    if is_suspended(job):
        return Diagnosis("queued", reason="Suspended")
    status = job.get("status") or {}
    for pod in ordered:
        if _pod_is_running(pod):
            return Diagnosis("running")
    if ordered:
        pending = diagnose_pending_pod(ordered[0])
        if pending is not None:
            return pending
        if (ordered[0].get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            # The pod ended; the Job controller has not written its condition yet.
            return Diagnosis("running")
        return Diagnosis("pending")
    if (status.get("ready") or 0) > 0:
        return Diagnosis("running")
    return Diagnosis("pending")


def diagnose_pending_pod(pod: JsonObj) -> Diagnosis | None:
    """Why a pod waits to start, or None when it is not waiting (running or ended)."""
    status = pod.get("status") or {}
    if status.get("phase") not in (None, "Pending"):
        return None
    for state in _container_states(pod):
        waiting = state.get("waiting")
        if not waiting:
            continue
        reason = waiting.get("reason") or ""
        code = WAITING_CODES.get(reason)
        if code is not None:
            return Diagnosis(
                "pending",
                error_code=code,
                reason=reason,
                message=waiting.get("message"),
                fail_now=reason in FAIL_NOW_REASONS,
            )
    unscheduled = _condition(pod, "PodScheduled")
    if unscheduled is not None and unscheduled.get("status") == "False":
        reason = unscheduled.get("reason") or "Unschedulable"
        return Diagnosis(
            "pending",
            error_code="unschedulable",
            reason=reason,
            message=unscheduled.get("message"),
        )
    for state in _container_states(pod):
        waiting = state.get("waiting")
        if waiting and waiting.get("reason"):
            return Diagnosis(
                "pending", reason=waiting.get("reason"), message=waiting.get("message")
            )
    return Diagnosis("pending")


def diagnose_deleted(last_job: JsonObj | None, pods: Iterable[JsonObj] = ()) -> Diagnosis:
    """The Job was deleted (not by us). Its last state may already have been final."""
    if last_job is not None:
        last = diagnose(last_job, pods)
        if last.final:
            return last
    return Diagnosis(
        "failed",
        RunStatus.FAILURE,
        EndReason.ORPHANED,
        error_code="deleted_externally",
        message="the Job was deleted before it finished, by someone other than this launcher",
    )


def _diagnose_failure(cond: JsonObj, pods: Sequence[JsonObj]) -> Diagnosis:
    reason = cond.get("reason")
    message = cond.get("message")
    exit_code = None
    for pod in pods:
        term = _terminated(pod)
        if term is not None and term.get("exitCode") is not None:
            exit_code = int(term["exitCode"])
            break
    if reason == "DeadlineExceeded":
        # The pod may never have started: say why in the message.
        why = diagnose_pending_pod(pods[0]) if pods else None
        if why is not None and why.error_code is not None:
            message = f"{message or 'deadline exceeded'}; the pod was waiting: {why.summary()}"
        return Diagnosis(
            "failed",
            RunStatus.TIMEOUT,
            EndReason.DEADLINE,
            error_code="deadline",
            exit_code=exit_code,
            reason=reason,
            message=message,
        )
    for pod in pods:
        found = _pod_failure(pod)
        if found is not None:
            return found
    return Diagnosis(
        "failed",
        RunStatus.FAILURE,
        EndReason.EXIT,
        error_code="job_failed",
        exit_code=exit_code,
        reason=reason,
        message=message,
    )


def _pod_failure(pod: JsonObj) -> Diagnosis | None:
    status = pod.get("status") or {}
    term = _terminated(pod)
    exit_code = int(term["exitCode"]) if term and term.get("exitCode") is not None else None
    if status.get("reason") == "Evicted":
        return Diagnosis(
            "failed",
            RunStatus.FAILURE,
            EndReason.EXIT,
            error_code="evicted",
            exit_code=exit_code,
            reason="Evicted",
            message=status.get("message"),
        )
    if status.get("reason") == "DeadlineExceeded":
        return Diagnosis(
            "failed",
            RunStatus.TIMEOUT,
            EndReason.DEADLINE,
            error_code="deadline",
            exit_code=exit_code,
            reason="DeadlineExceeded",
            message=status.get("message"),
        )
    disrupted = true_condition(pod, "DisruptionTarget")
    if disrupted is not None and (term is None or term.get("reason") != "OOMKilled"):
        return Diagnosis(
            "failed",
            RunStatus.FAILURE,
            EndReason.EXIT,
            error_code="evicted",
            exit_code=exit_code,
            reason=disrupted.get("reason") or "DisruptionTarget",
            message=disrupted.get("message"),
        )
    if term is not None:
        t_reason = term.get("reason")
        if t_reason == "OOMKilled":
            return Diagnosis(
                "failed",
                RunStatus.FAILURE,
                EndReason.EXIT,
                error_code="oom_killed",
                exit_code=exit_code if exit_code is not None else 137,
                reason="OOMKilled",
                message=term.get("message") or "the container went over its memory limit",
            )
        if t_reason in START_FAILURE_REASONS:
            return Diagnosis(
                "failed",
                RunStatus.FAILURE,
                EndReason.START_FAILED,
                error_code="start_error",
                exit_code=exit_code,
                reason=t_reason,
                message=term.get("message"),
            )
        if exit_code not in (None, 0):
            return Diagnosis(
                "failed",
                RunStatus.FAILURE,
                EndReason.EXIT,
                error_code="exit_code",
                exit_code=exit_code,
                reason=t_reason or "Error",
                message=term.get("message") or f"the command exited with code {exit_code}",
            )
    waiting = diagnose_pending_pod({**pod, "status": {**status, "phase": "Pending"}})
    if waiting is not None and waiting.error_code is not None:
        return Diagnosis(
            "failed",
            RunStatus.FAILURE,
            EndReason.START_FAILED,
            error_code=waiting.error_code,
            reason=waiting.reason,
            message=waiting.message,
        )
    return None


def _newest_first(pods: Iterable[JsonObj]) -> list[JsonObj]:
    def created(pod: JsonObj) -> str:
        return str((pod.get("metadata") or {}).get("creationTimestamp") or "")

    return sorted(pods, key=created, reverse=True)


def _condition(obj: JsonObj, kind: str) -> JsonObj | None:
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("type") == kind:
            return cond  # type: ignore[no-any-return]
    return None


def _container_states(pod: JsonObj) -> list[JsonObj]:
    status = pod.get("status") or {}
    out: list[JsonObj] = []
    for key in ("initContainerStatuses", "containerStatuses"):
        for cs in status.get(key) or ():
            state = cs.get("state")
            if state:
                out.append(state)
    return out


def _terminated(pod: JsonObj) -> JsonObj | None:
    """The first terminated container state that failed, else the first terminated one."""
    found: JsonObj | None = None
    for state in _container_states(pod):
        term = state.get("terminated")
        if not term:
            continue
        if term.get("exitCode") not in (None, 0) or term.get("reason") not in (None, "Completed"):
            return term  # type: ignore[no-any-return]
        if found is None:
            found = term
    return found


def _pod_is_running(pod: JsonObj) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") == "Running":
        return True
    return any(state.get("running") for state in _container_states(pod))
