"""Where the cluster is and which namespace a run goes to.

Cluster: in-cluster service account first, then the first file of `KUBECONFIG`, then
`~/.kube/config` (lightkube reads the files, auth plugins and certificates). A `KUBECONFIG` that
names no readable file is an error (`cluster_problem`), never "no cluster": pod jobs must not
quietly run inline because of a typo.
Namespace: the profile's, else `KUBERNETES_NAMESPACE`, else the service account's namespace
file, else `default` with a warning (once per process).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import structlog
from lightkube.config.kubeconfig import KubeConfig, SingleConfig
from lightkube.core.exceptions import ConfigError as LightkubeConfigError

from runlane.adapters.kubernetes.manifests import DEFAULT_TTL_SECONDS
from runlane.core.durations import env_duration
from runlane.errors import ConfigError

log = structlog.get_logger("runlane.kubernetes")

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DEFAULT_KUBECONFIG = "~/.kube/config"
_warned_default_namespace = False  # `kubernetes.namespace_default` is logged once per process


def _in_cluster(environ: Mapping[str, str], sa_dir: Path) -> bool:
    return bool(environ.get("KUBERNETES_SERVICE_HOST")) and (sa_dir / "token").is_file()


def kubeconfig_path(environ: Mapping[str, str]) -> Path | None:
    """The kubeconfig file to use: the first existing one of `KUBECONFIG`, else ~/.kube/config."""
    listed = environ.get("KUBECONFIG")
    if listed:
        for part in listed.split(os.pathsep):
            if part and Path(part).expanduser().is_file():
                return Path(part).expanduser()
        return None
    home = Path(environ.get("HOME") or Path.home())
    path = home / ".kube" / "config"
    return path if path.is_file() else None


def cluster_problem(
    environ: Mapping[str, str] | None = None, sa_dir: Path = SERVICE_ACCOUNT_DIR
) -> str | None:
    """Why the cluster named explicitly cannot be used, or None: `KUBECONFIG` is set (and we are
    not in a cluster) but none of its files exists, or the one to use cannot be read."""
    env = os.environ if environ is None else environ
    listed = env.get("KUBECONFIG")
    if not listed or _in_cluster(env, sa_dir):
        return None
    parts = [part for part in listed.split(os.pathsep) if part]
    if not parts:
        return None
    path = kubeconfig_path(env)
    if path is None:
        return f"KUBECONFIG={listed} names no kubeconfig file that exists ({', '.join(parts)})"
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        return f"the kubeconfig {path} (from KUBECONFIG) cannot be read: {exc.strerror}"
    return None


def cluster_configured(
    environ: Mapping[str, str] | None = None, sa_dir: Path = SERVICE_ACCOUNT_DIR
) -> bool:
    """Whether a cluster is configured (in-cluster, or a kubeconfig file exists)."""
    env = os.environ if environ is None else environ
    return _in_cluster(env, sa_dir) or kubeconfig_path(env) is not None


def load_cluster_config(
    environ: Mapping[str, str] | None = None, sa_dir: Path = SERVICE_ACCOUNT_DIR
) -> SingleConfig:
    env = os.environ if environ is None else environ
    try:
        if _in_cluster(env, sa_dir):
            cfg = KubeConfig.from_service_account(service_account=sa_dir).get()
        else:
            problem = cluster_problem(env, sa_dir)
            if problem is not None:
                raise ConfigError(problem)
            path = kubeconfig_path(env)
            if path is None:
                raise ConfigError(
                    "no Kubernetes cluster configured: not in a cluster, and no kubeconfig "
                    "(KUBECONFIG or ~/.kube/config)"
                )
            cfg = KubeConfig.from_file(path).get()
    except LightkubeConfigError as exc:
        raise ConfigError(f"cannot read the Kubernetes configuration: {exc}") from exc
    if cfg is None:
        raise ConfigError("the kubeconfig has no current context")
    return cfg


def resolve_namespace(
    profile_namespace: str | None,
    environ: Mapping[str, str] | None = None,
    sa_dir: Path = SERVICE_ACCOUNT_DIR,
) -> str:
    """The namespace of a run: profile, `KUBERNETES_NAMESPACE`, service account file, `default`."""
    if profile_namespace:
        return profile_namespace
    env = os.environ if environ is None else environ
    from_env = env.get("KUBERNETES_NAMESPACE")
    if from_env:
        return from_env
    try:
        from_file = (sa_dir / "namespace").read_text().strip()
    except OSError:
        from_file = ""
    if from_file:
        return from_file
    global _warned_default_namespace
    if not _warned_default_namespace:
        _warned_default_namespace = True
        log.warning(
            "kubernetes.namespace_default",
            hint="set the profile's namespace or KUBERNETES_NAMESPACE; using 'default'",
        )
    return "default"


# A finished Job must outlive the launcher's look at it (its watch may lag, or the run may be
# taken over after a lease expiry): gone sooner, the run's outcome is unknown.
MIN_JOB_TTL_SECONDS = 600
MAX_JOB_TTL_SECONDS = 30 * 86_400


def job_ttl_seconds(environ: Mapping[str, str] | None = None) -> int:
    """`RUNLANE_POD_JOB_TTL`: how long a finished Job (and its pod, with its log) stays in the
    cluster, its `ttlSecondsAfterFinished`; 1 day when unset. Every launcher's watch holds each
    runlane Job and pod of its namespaces until then (docs/kubernetes.md, *Memory*)."""
    seconds = env_duration(
        os.environ if environ is None else environ,
        "RUNLANE_POD_JOB_TTL",
        DEFAULT_TTL_SECONDS,
        minimum=MIN_JOB_TTL_SECONDS,
        maximum=MAX_JOB_TTL_SECONDS,
        why="a finished Job must stay until its launcher has read its outcome",
    )
    return round(seconds)
