"""Deterministic Kubernetes names and label values for runs.

A Job's name is copied into its pods' `batch.kubernetes.io/job-name` label, so it must be a
DNS-1123 label (≤ 63 characters, lowercase alphanumerics and `-`, alphanumeric at both ends) —
not merely a DNS subdomain. The same (job, run id, attempt) always gives the same name: a second
`create` after a lost response hits 409 instead of starting the run twice.
"""

from __future__ import annotations

import hashlib
import re

DNS1123_LABEL_MAX = 63
LABEL_VALUE_MAX = 63
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_NOT_DNS = re.compile(r"[^a-z0-9]+")
_NOT_LABEL = re.compile(r"[^A-Za-z0-9_.-]+")
_HASH_CHARS = 10
PREFIX = "rl"


def is_dns1123_label(name: str) -> bool:
    return len(name) <= DNS1123_LABEL_MAX and _DNS1123_LABEL.fullmatch(name) is not None


def is_label_value(value: str) -> bool:
    return len(value) <= LABEL_VALUE_MAX and _LABEL_VALUE.fullmatch(value) is not None


def slug(text: str) -> str:
    """Lowercase alphanumerics joined by single `-`, no `-` at either end (may be empty)."""
    return _NOT_DNS.sub("-", text.lower()).strip("-")


def run_digest(job: str, run_id: str, attempt: int) -> str:
    return hashlib.sha256(f"{job}|{run_id}|{attempt}".encode()).hexdigest()[:_HASH_CHARS]


def job_name(job: str, run_id: str, attempt: int) -> str:
    """`rl-<slug(job)>-<sha256(job|run_id|attempt)[:10]>-a<attempt>`, the slug cut to fit 63.

    The hash makes the name unique per (job, run, attempt); the slug and the attempt make it
    readable in `kubectl get jobs`.
    """
    if attempt < 1:
        raise ValueError(f"attempt must be at least 1, not {attempt}")
    tail = f"{run_digest(job, run_id, attempt)}-a{attempt}"
    room = DNS1123_LABEL_MAX - len(PREFIX) - 1 - len(tail) - 1
    head = slug(job)[: max(room, 0)].rstrip("-")
    name = f"{PREFIX}-{head}-{tail}" if head else f"{PREFIX}-{tail}"
    if not is_dns1123_label(name):  # only a 40-digit attempt could get here
        raise ValueError(f"cannot make a Job name for attempt {attempt}")
    return name


def params_config_map_name(job_name_: str) -> str:
    """The ConfigMap holding a run's params when they do not fit in the environment."""
    return f"{job_name_}-params"


def label_value(text: str) -> str:
    """`text` made into a valid label value: characters outside `[A-Za-z0-9_.-]` become `-`,
    cut to 63, non-alphanumeric ends stripped. Full values belong in annotations."""
    value = _NOT_LABEL.sub("-", text)[:LABEL_VALUE_MAX]
    return value.strip("-_.")
