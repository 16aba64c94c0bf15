"""The Job a run becomes: every field from profile + job, env budget, ConfigMap spill; every
object validated offline against the Kubernetes schema."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest

from runlane.adapters.kubernetes.manifests import (
    ENV_BUDGET_BYTES,
    PARAMS_FILE_ENV,
    belongs_to,
    build_job_plan,
    env_size,
    expand_image,
    split_env,
)
from runlane.adapters.kubernetes.names import is_dns1123_label
from runlane.catalog.models import Profile
from runlane.errors import PermanentExecutorError
from runlane.ports import ExecutionSpec

K8S_VERSION = "1.31"
RUN = "0f1e2d3c-aaaa-bbbb-cccc-123456789abc"


def validate(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(json.loads(json.dumps(obj)), K8S_VERSION, strict=True)


def spec(**kw: Any) -> ExecutionSpec:
    profile = Profile.model_validate(
        kw.pop(
            "profile",
            {
                "image": "${CORE_IMAGE}",
                "secrets": ["report-creds"],
                "serviceAccount": "reporter",
                "volumes": [
                    "shared-data",
                    {
                        "name": "certs",
                        "secret": "tls-certs",
                        "mountPath": "/etc/certs",
                        "readOnly": True,
                    },
                    {"name": "conf_files", "configMap": "report-conf"},
                ],
                "resources": {
                    "requests": {"cpu": "250m", "memory": "4Gi"},
                    "limits": {"memory": "6Gi"},
                },
                "nodeSelector": {"role": "batch"},
                "tolerations": [{"key": "batch", "operator": "Exists", "effect": "NoSchedule"}],
            },
        )
    ).model_dump()
    env = kw.pop(
        "env",
        {
            "RUN_ID": RUN,
            "RUN_TRIGGER": "manual",
            "RUN_PARENT_ID": "",
            "RUNLANE_PARAMS": '{"week":3}',
            "RUNLANE_PARAM_WEEK": "3",
        },
    )
    return ExecutionSpec(
        run_id=kw.pop("run_id", RUN),
        job=kw.pop("job", "nightly.report"),
        attempt=kw.pop("attempt", 2),
        trigger="manual",
        command=["python", "-m", "report", "--week", "3"],
        params={"week": 3},
        env=env,
        deadline_seconds=kw.pop("deadline_seconds", 1799.2),
        kill_grace_seconds=30.0,
        profile=profile,
        **kw,
    )


def test_job_from_profile_and_job() -> None:
    plan = build_job_plan(spec(), namespace="jobs", launcher_env={"CORE_IMAGE": "reg/core:1.4"})
    job = plan.job
    validate(job)
    assert is_dns1123_label(plan.name)
    assert job["metadata"]["namespace"] == "jobs"
    assert job["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "runlane",
        "runlane.dev/job": "nightly.report",
        "runlane.dev/run-id": RUN,
        "runlane.dev/attempt": "2",
    }
    js = job["spec"]
    assert js["backoffLimit"] == 0
    assert js["activeDeadlineSeconds"] == 1800
    assert js["ttlSecondsAfterFinished"] == 86400
    pod = js["template"]["spec"]
    assert js["template"]["metadata"]["labels"] == job["metadata"]["labels"]
    assert pod["restartPolicy"] == "Never"
    assert pod["serviceAccountName"] == "reporter"
    assert pod["nodeSelector"] == {"role": "batch"}
    assert pod["tolerations"][0]["key"] == "batch"
    assert pod["terminationGracePeriodSeconds"] == 30
    (c,) = pod["containers"]
    assert c["image"] == "reg/core:1.4"
    assert c["command"] == ["python", "-m", "report", "--week", "3"]
    assert {"name": "RUN_ID", "value": RUN} in c["env"]
    assert {"name": "RUNLANE_PARAM_WEEK", "value": "3"} in c["env"]
    assert c["envFrom"] == [{"secretRef": {"name": "report-creds"}}]
    assert c["resources"] == {
        "requests": {"cpu": "250m", "memory": "4Gi"},
        "limits": {"memory": "6Gi"},
    }
    vols = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert vols["v0-shared-data"]["persistentVolumeClaim"]["claimName"] == "shared-data"
    assert mounts["v0-shared-data"]["mountPath"] == "/mnt/shared-data"
    assert vols["v1-certs"]["secret"] == {"secretName": "tls-certs"}
    assert mounts["v1-certs"] == {"name": "v1-certs", "mountPath": "/etc/certs", "readOnly": True}
    assert vols["v2-conf-files"]["configMap"] == {"name": "report-conf"}
    assert plan.params is None
    assert belongs_to(job, RUN, 2)
    assert not belongs_to(job, RUN, 3)
    assert not belongs_to(job, RUN[:-1] + "d", 2)


def test_minimal_profile_and_scratch() -> None:
    plan = build_job_plan(
        spec(profile={"image": "busybox:1.36"}),
        namespace="default",
        launcher_env={},
        scratch="256Mi",
    )
    validate(plan.job)
    pod = plan.job["spec"]["template"]["spec"]
    assert "serviceAccountName" not in pod
    assert pod["volumes"] == [
        {"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "256Mi"}}
    ]
    assert pod["containers"][0]["volumeMounts"] == [{"name": "scratch", "mountPath": "/scratch"}]


def test_image_expansion() -> None:
    assert (
        expand_image("${REG}/core:${TAG}", {"REG": "r.example", "TAG": "2"}) == "r.example/core:2"
    )
    assert expand_image("busybox", {}) == "busybox"
    with pytest.raises(PermanentExecutorError) as err:
        expand_image("${REG}/core:${TAG}", {"REG": "x"})
    assert err.value.code == "config_error"
    assert "TAG" in str(err.value)


def test_no_image_is_refused() -> None:
    with pytest.raises(PermanentExecutorError) as err:
        build_job_plan(spec(profile={}), namespace="d", launcher_env={})
    assert err.value.code == "config_error"


def test_large_params_spill_into_an_owned_config_map() -> None:
    big = "x" * 200_000
    env = {
        "RUN_ID": RUN,
        "RUNLANE_PARAMS": json.dumps({"blob": big}),
        "RUNLANE_PARAM_BLOB": big,
        "RUNLANE_PARAM_WEEK": "3",
    }
    plan = build_job_plan(spec(env=env), namespace="jobs", launcher_env={"CORE_IMAGE": "i"})
    validate(plan.job)
    c = plan.job["spec"]["template"]["spec"]["containers"][0]
    inline = {e["name"]: e["value"] for e in c["env"]}
    assert env_size(inline) <= ENV_BUDGET_BYTES
    assert inline[PARAMS_FILE_ENV] == "/var/run/runlane/params/params.json"
    assert inline["RUNLANE_PARAM_WEEK"] == "3"
    assert "RUNLANE_PARAMS" not in inline
    assert "RUNLANE_PARAM_BLOB" not in inline
    assert plan.params is not None
    assert set(plan.params) == {"params.json", "RUNLANE_PARAM_BLOB"}
    cm = plan.config_map("uid-1")
    validate(cm)
    assert cm["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert cm["metadata"]["ownerReferences"][0]["kind"] == "Job"
    assert cm["metadata"]["labels"] == plan.job["metadata"]["labels"]
    vols = plan.job["spec"]["template"]["spec"]["volumes"]
    assert {"name": "runlane-params", "configMap": {"name": cm["metadata"]["name"]}} in vols


def test_small_env_is_not_split() -> None:
    env = {"A": "1"}
    assert split_env(env) == (env, None)
    plan = build_job_plan(spec(profile={"image": "i"}), namespace="d", launcher_env={})
    with pytest.raises(ValueError):
        plan.config_map("u")


def test_env_too_large_without_params() -> None:
    with pytest.raises(PermanentExecutorError) as err:
        split_env({"HUGE": "y" * (ENV_BUDGET_BYTES + 1)})
    assert err.value.code == "env_too_large"


def test_deadline_is_at_least_one_second() -> None:
    plan = build_job_plan(
        spec(profile={"image": "i"}, deadline_seconds=0.2), namespace="d", launcher_env={}
    )
    assert plan.job["spec"]["activeDeadlineSeconds"] == 1


def test_a_profiles_scratch_overrides_the_executors_default() -> None:
    """The catalog's `scratch` (None when the profile does not say) over PodExecutor's default:
    a size sets the limit, `true` none, `false` no volume at all."""

    def scratch_volume(profile_scratch: object, default: bool | str) -> object:
        profile = {"image": "busybox:1.36", "scratch": profile_scratch}
        plan = build_job_plan(
            spec(profile=profile), namespace="default", launcher_env={}, scratch=default
        )
        validate(plan.job)
        vols = plan.job["spec"]["template"]["spec"].get("volumes", [])
        return next((v["emptyDir"] for v in vols if v["name"] == "scratch"), None)

    assert scratch_volume(None, "256Mi") == {"medium": "Memory", "sizeLimit": "256Mi"}
    assert scratch_volume(None, False) is None
    assert scratch_volume("1Gi", "256Mi") == {"medium": "Memory", "sizeLimit": "1Gi"}
    assert scratch_volume(True, "256Mi") == {"medium": "Memory"}
    assert scratch_volume(False, "256Mi") is None
