"""What a run's `error_code` means, in one sentence a person can act on: the words the web
UI's run page (and any face) shows next to the code. The codes are the executors' and the
launcher's (docs/reliability.md, docs/kubernetes.md); a test keeps this table and the codes
the source writes in step."""

from __future__ import annotations

from collections.abc import Mapping

RUN_ERROR_TEXTS: Mapping[str, str] = {
    # How the command ended
    "exit_code": "The command exited with a non-zero exit code (see the exit code and the log).",
    "exception": "The job raised an exception inside its run scope (the note has its type).",
    "deadline": "The run passed its deadline and was stopped (or never started before it).",
    "cancelled": "Someone cancelled the run (cancel_requested_at says when).",
    "oom_killed": "The container used more memory than its limit and was killed (OOMKilled).",
    "evicted": "Kubernetes evicted or preempted the pod (node pressure, a drain, preemption).",
    "job_failed": "The Kubernetes Job failed and no pod was left to say why.",
    "no_outcome": "The run's process was lost and its outcome could not be read.",
    # Starting it
    "command_not_found": "The job's command is not an executable on the launcher's machine.",
    "permission_denied": "The job's command (or its working directory) may not be executed.",
    "spawn_failed": "The launcher could not start the job's process (the note says why).",
    "invalid_spec": "The job's definition cannot be executed as written (an empty command, a "
    "spec the cluster refuses).",
    "config_error": "The job's configuration is wrong for its executor (a missing secret or "
    "config map, an executor that is not available).",
    "env_too_large": "The params and environment are larger than a process may be given.",
    "params_too_large": "The params are too large to pass to a pod, even as a config map.",
    "image_pull": "The container image could not be pulled (a wrong name or tag, no access to "
    "the registry).",
    "invalid_image": "The container image name is not valid; the run fails at once, untried.",
    "unschedulable": "No node could take the pod (resources, node selector, taints).",
    "start_error": "The container was created but could not start its command.",
    "start_timeout": "The pod stayed pending past the start timeout and was deleted.",
    "name_busy": "A Kubernetes Job of this run's name is still being deleted.",
    "name_collision": "A Kubernetes Job (or Slurm job) of this run's name belongs to another run.",
    "deleted_externally": "The run's Kubernetes Job (or Slurm job) was deleted by someone else "
    "(or removed by its TTL) before runlane saw it end.",
    # The cluster's API
    "forbidden": "Kubernetes refused the launcher's request: its service account lacks a "
    "permission (see the RBAC in docs/kubernetes.md).",
    "unauthorized": "Kubernetes did not accept the launcher's credentials.",
    "api_timeout": "The Kubernetes API did not answer in time; the launcher tries again.",
    "api_unavailable": "The Kubernetes API could not be reached; the launcher tries again.",
    "api_throttled": "The Kubernetes API asked the launcher to slow down; it tries again.",
    "kubernetes_error": "Kubernetes refused the launcher's request (the note has its answer).",
    "executor_error": "The executor failed (the note says how).",
    "executor_temporary": "The executor could not be reached right now; the launcher tries again.",
    "executor_permanent": "The executor refused the run for good (the note says why).",
    # Slurm (docs/slurm.md)
    "cancelled_externally": "The run's Slurm job was cancelled outside runlane (scancel by a "
    "user or an administrator).",
    "node_fail": "The Slurm node running the job failed (NODE_FAIL).",
    "boot_fail": "The Slurm node for the job failed to boot (BOOT_FAIL).",
    "preempted": "Slurm preempted the job for another one (PREEMPTED); it was not requeued.",
    "slurm_unsatisfiable": "Slurm can never run the job as requested (a partition, constraint "
    "or limit no node meets); the note has the pending reason.",
    "slurm_refused": "sbatch refused the job (an invalid partition, account or QOS, a request "
    "no node can meet); the note has Slurm's words.",
    "slurm_unavailable": "slurmctld could not be reached (or a Slurm client tool is missing); "
    "the launcher tries again.",
    "slurm_timeout": "A Slurm client tool did not answer in time; the launcher tries again.",
    "slurm_error": "Slurm gave an answer runlane could not read (the note has it).",
    "slurm_job_lost": "The run's Slurm job vanished: slurmctld forgot it and no completion "
    "record names it.",
    # The launcher
    "spawner_lost": "The launcher's spawner process running the run died (killed, or out of "
    "memory); the launcher killed the run's processes and retries it if attempts remain.",
    "launcher_lost": "The launcher supervising the run stopped beating; another one took the "
    "run over or ended it.",
    "launcher_shutdown": "The launcher was shut down while the run was running.",
    "unknown_job": "The run's job is not in the launcher's catalog; the run is kept for repair "
    "(runlane doctor).",
    "corrupt_params": "The run's stored params are not valid JSON; the run is kept for repair "
    "(runlane doctor).",
}

SIGNAL_PREFIX = "signal_"


def explain_error_code(code: str | None) -> str | None:
    """The sentence for `code`; `signal_sigkill` and the like say which signal ended the
    process. None for None; a code this table does not know gets a plain sentence saying so."""
    if code is None:
        return None
    if code in RUN_ERROR_TEXTS:
        return RUN_ERROR_TEXTS[code]
    if code.startswith(SIGNAL_PREFIX):
        name = code.removeprefix(SIGNAL_PREFIX).upper()
        return f"The process was ended by a signal ({name})."
    return "A code this version of runlane has no description for (see the run's note)."
