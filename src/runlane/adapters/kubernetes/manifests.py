"""The objects the pod executor sends: a run's `batch/v1` Job (and, for large params, the
ConfigMap that carries them). Pure: no API calls, no clock; `launcher_env` is passed in.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runlane.adapters.kubernetes.names import job_name, label_value, params_config_map_name, slug
from runlane.core import envsplit
from runlane.core.envsplit import ENV_BUDGET_BYTES as ENV_BUDGET_BYTES  # re-exported
from runlane.core.envsplit import PARAMS_FILE_ENV as PARAMS_FILE_ENV
from runlane.core.envsplit import PARAMS_FILE_KEY as PARAMS_FILE_KEY
from runlane.core.envsplit import env_size as env_size
from runlane.errors import PermanentExecutorError
from runlane.ports import ExecutionSpec

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "runlane"
MANAGED_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
JOB_LABEL = "runlane.dev/job"
RUN_LABEL = "runlane.dev/run-id"
ATTEMPT_LABEL = "runlane.dev/attempt"
RUN_ANNOTATION = "runlane.dev/run-id"
JOB_ANNOTATION = "runlane.dev/job"
CONTAINER = "run"

DEFAULT_TTL_SECONDS = 86_400
# Params over the environment budget travel in a ConfigMap mounted here (core/envsplit.py).
PARAMS_MOUNT_DIR = "/var/run/runlane/params"
PARAMS_VOLUME = "runlane-params"  # the pod volume of that ConfigMap
SCRATCH_DIR = "/scratch"
# The API server refuses a ConfigMap whose data (keys and values, in bytes) exceeds 1 MiB.
CONFIG_MAP_MAX_BYTES = 1024 * 1024
# The single RUNLANE_PARAM_* files share what params.json leaves, minus this margin.
CONFIG_MAP_MARGIN_BYTES = 16 * 1024
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True, slots=True)
class JobPlan:
    """What `start` creates for one run attempt."""

    name: str
    namespace: str
    job: dict[str, Any]
    params: dict[str, str] | None  # ConfigMap data when the params do not fit in the env

    def config_map(self, owner_uid: str) -> dict[str, Any]:
        """The params ConfigMap, owned by the Job (uid) so garbage collection removes it with
        the Job. Created after the Job because the owner's uid is needed; the pod's volume
        mount waits for it (the kubelet retries a missing ConfigMap)."""
        if self.params is None:
            raise ValueError("this run's params fit in the environment")
        meta = self.job["metadata"]
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": params_config_map_name(self.name),
                "namespace": self.namespace,
                "labels": dict(meta["labels"]),
                "annotations": dict(meta["annotations"]),
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": self.name,
                        "uid": owner_uid,
                        "blockOwnerDeletion": False,
                        "controller": False,
                    }
                ],
            },
            "data": dict(self.params),
        }


def run_labels(job: str, run_id: str, attempt: int) -> dict[str, str]:
    return {
        MANAGED_BY_LABEL: MANAGED_BY,
        JOB_LABEL: label_value(job),
        RUN_LABEL: label_value(run_id),
        ATTEMPT_LABEL: str(attempt),
    }


def belongs_to(obj: Mapping[str, Any], run_id: str, attempt: int) -> bool:
    """Whether an object found under a run's name was made for this run and attempt."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    return (
        labels.get(MANAGED_BY_LABEL) == MANAGED_BY
        and labels.get(ATTEMPT_LABEL) == str(attempt)
        and labels.get(RUN_LABEL) == label_value(run_id)
        and annotations.get(RUN_ANNOTATION, run_id) == run_id
    )


def expand_image(image: str, environ: Mapping[str, str]) -> str:
    """`${VAR}` in an image reference, from the launcher's environment. Unset → refused."""
    missing = sorted({m.group(1) for m in _VAR.finditer(image) if m.group(1) not in environ})
    if missing:
        raise PermanentExecutorError(
            f"image {image!r} names {', '.join(missing)}, which the launcher's environment "
            "does not set",
            error_code="config_error",
        )
    return _VAR.sub(lambda m: environ[m.group(1)], image)


def split_env(env: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str] | None]:
    """The environment to pass inline, and the params to put in a ConfigMap mounted at
    PARAMS_MOUNT_DIR instead (or None): `runlane.core.envsplit.split_env`, with the files kept
    under the ConfigMap limit. `params.json` always goes (as UTF-8, not `\\u` escapes); a single
    `RUNLANE_PARAM_*` that fits neither the environment nor the rest of the ConfigMap is left
    out (the job reads it from `params.json`). Raises PermanentExecutorError
    (`params_too_large`) when `params.json` alone cannot be held by a ConfigMap."""
    inline, spilled = envsplit.split_env(
        env, PARAMS_MOUNT_DIR, files_budget=CONFIG_MAP_MAX_BYTES - CONFIG_MAP_MARGIN_BYTES
    )
    if spilled is None or PARAMS_FILE_KEY not in spilled:
        return inline, spilled
    spilled[PARAMS_FILE_KEY] = _compact_json(spilled[PARAMS_FILE_KEY])
    size = envsplit.file_size({PARAMS_FILE_KEY: spilled[PARAMS_FILE_KEY]})
    if size > CONFIG_MAP_MAX_BYTES:
        raise PermanentExecutorError(
            f"the run's params are {size - len(PARAMS_FILE_KEY)} bytes as JSON; a pod receives "
            f"them in a ConfigMap, which holds at most {CONFIG_MAP_MAX_BYTES - len(PARAMS_FILE_KEY)} "
            "bytes of params.json",
            error_code="params_too_large",
        )
    while envsplit.file_size(spilled) > CONFIG_MAP_MAX_BYTES:  # only if the margin was too small
        largest = max((k for k in spilled if k != PARAMS_FILE_KEY), key=lambda k: len(spilled[k]))
        del spilled[largest]
    return inline, spilled


def _compact_json(text: str) -> str:
    """The same JSON with non-ASCII characters as UTF-8 instead of `\\uXXXX` escapes (up to 6
    bytes for 2): the size the params were accepted at (MAX_PARAMS_BYTES)."""
    if "\\u" not in text:
        return text
    try:
        value = json.loads(text)
    except ValueError:
        return text
    compact = json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    try:
        smaller = len(compact.encode()) < len(text.encode())
    except UnicodeEncodeError:  # a lone surrogate: only the escaped form is valid UTF-8
        return text
    return compact if smaller else text


def _get(profile: Mapping[str, Any], *names: str) -> Any:
    """A profile field by its catalog alias or its Python name (`serviceAccount`, `service_account`)."""
    for name in names:
        value = profile.get(name)
        if value not in (None, "", [], {}):
            return value
    return None


def _volumes(profile: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    for index, raw in enumerate(profile.get("volumes") or ()):
        vol: Mapping[str, Any] = {"name": raw, "pvc": raw} if isinstance(raw, str) else raw
        name = str(vol["name"])
        read_only = bool(_get(vol, "readOnly", "read_only") or False)
        # Pod volume names are DNS-1123 labels; the index keeps two similar names apart.
        pod_volume: dict[str, Any] = {"name": f"v{index}-{slug(name)[:50]}".rstrip("-")}
        secret = _get(vol, "secret")
        config_map = _get(vol, "configMap", "config_map")
        if secret is not None:
            pod_volume["secret"] = {"secretName": secret}
        elif config_map is not None:
            pod_volume["configMap"] = {"name": config_map}
        else:
            claim = _get(vol, "pvc") or name
            pod_volume["persistentVolumeClaim"] = {"claimName": claim, "readOnly": read_only}
        volumes.append(pod_volume)
        mounts.append(
            {
                "name": pod_volume["name"],
                "mountPath": _get(vol, "mountPath", "mount_path") or f"/mnt/{name}",
                "readOnly": read_only,
            }
        )
    return volumes, mounts


def _scratch(profile: Mapping[str, Any], default: bool | str) -> str | None:
    """`scratch: true` or a size (`512Mi`) → an in-memory emptyDir at /scratch; a profile
    that does not say (None) gets the executor's default, `false` none."""
    value = profile.get("scratch")
    if value is None:
        value = default
    if value is True:
        return ""
    if isinstance(value, str) and value:
        return value
    return None


def build_job_plan(
    spec: ExecutionSpec,
    *,
    namespace: str,
    launcher_env: Mapping[str, str],
    ttl_seconds: int = DEFAULT_TTL_SECONDS,
    scratch: bool | str = False,
) -> JobPlan:
    """The Job for one run attempt, from the job's command and env and the profile."""
    profile = spec.profile or {}
    image_ref = _get(profile, "image")
    if image_ref is None:
        raise PermanentExecutorError(
            f"job {spec.job!r} runs as a pod but its profile names no image",
            error_code="config_error",
        )
    if not spec.command:
        raise PermanentExecutorError("the job has an empty command", error_code="invalid_spec")
    image = expand_image(str(image_ref), launcher_env)
    name = job_name(spec.job, spec.run_id, spec.attempt)
    labels = run_labels(spec.job, spec.run_id, spec.attempt)
    annotations = {RUN_ANNOTATION: spec.run_id, JOB_ANNOTATION: spec.job}
    inline_env, spilled = split_env(spec.env)

    volumes, mounts = _volumes(profile)
    if spilled is not None:
        volumes.append({"name": PARAMS_VOLUME, "configMap": {"name": params_config_map_name(name)}})
        mounts.append({"name": PARAMS_VOLUME, "mountPath": PARAMS_MOUNT_DIR, "readOnly": True})
    scratch_size = _scratch(profile, scratch)
    if scratch_size is not None:
        empty_dir: dict[str, Any] = {"medium": "Memory"}
        if scratch_size:
            empty_dir["sizeLimit"] = scratch_size
        volumes.append({"name": "scratch", "emptyDir": empty_dir})
        mounts.append({"name": "scratch", "mountPath": SCRATCH_DIR})

    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image,
        "command": list(spec.command),
        "env": [{"name": k, "value": v} for k, v in inline_env.items()],
    }
    secrets = _get(profile, "secrets") or []
    if secrets:
        container["envFrom"] = [{"secretRef": {"name": s}} for s in secrets]
    resources = _get(profile, "resources") or {}
    res = {k: dict(v) for k, v in resources.items() if k in ("requests", "limits") and v}
    if res:
        container["resources"] = res
    if mounts:
        container["volumeMounts"] = mounts

    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": max(0, math.ceil(spec.kill_grace_seconds)),
        "containers": [container],
    }
    service_account = _get(profile, "serviceAccount", "service_account")
    if service_account:
        pod_spec["serviceAccountName"] = service_account
    node_selector = _get(profile, "nodeSelector", "node_selector")
    if node_selector:
        pod_spec["nodeSelector"] = {k: str(v) for k, v in node_selector.items()}
    tolerations = _get(profile, "tolerations")
    if tolerations:
        pod_spec["tolerations"] = [dict(t) for t in tolerations]
    if volumes:
        pod_spec["volumes"] = volumes

    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {
            "backoffLimit": 0,
            "completions": 1,
            "parallelism": 1,
            "activeDeadlineSeconds": max(1, math.ceil(spec.deadline_seconds)),
            "ttlSecondsAfterFinished": ttl_seconds,
            "template": {
                "metadata": {"labels": dict(labels), "annotations": dict(annotations)},
                "spec": pod_spec,
            },
        },
    }
    return JobPlan(name=name, namespace=namespace, job=job, params=spilled)
