"""Effective configuration: flags, then environment, then defaults. `runlane config` prints it."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from runlane.core.durations import parse_duration
from runlane.errors import ConfigError


def _env_duration(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = parse_duration(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}={raw!r}: {exc}") from exc
    if value <= 0:
        raise ConfigError(f"{name}={raw!r}: must be greater than zero")
    return value


def _env_int(env: Mapping[str, str], name: str, default: int, minimum: int = 1) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}={raw!r}: expected a whole number") from exc
    if value < minimum:
        raise ConfigError(f"{name}={raw!r}: must be at least {minimum}")
    return value


def default_launcher_id() -> str:
    """host:pid:random — unique per launcher process, readable in `runlane status`."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything the launcher and the CLI read from outside. Durations are seconds."""

    database_url: str = "sqlite:///runlane.db"
    catalog_path: str = "catalog.yaml"
    log_dir: str = ".runlane/logs"
    concurrency: int = 16
    lease_ttl: float = 30.0
    lease_renew_interval: float = 10.0
    claim_interval: float = 1.0
    orphan_check_interval: float = 60.0
    orphan_grace: float = 600.0  # running this long past the deadline, unsupervised → orphaned
    heartbeat_interval: float = 15.0
    shutdown_grace: float = 10.0
    expire_interval: float = 1.0
    retry_base: float = 5.0  # first retry backoff; doubles per attempt, capped at 5 minutes
    pod_fallback: str = "inline"  # or "refuse": pod jobs without a cluster are refused
    launcher_id: str = field(default_factory=default_launcher_id)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        e = os.environ if env is None else env
        ttl = _env_duration(e, "RUNLANE_LEASE_TTL", 30.0)
        settings = cls(
            database_url=e.get("RUNLANE_DATABASE_URL") or "sqlite:///runlane.db",
            catalog_path=e.get("RUNLANE_CATALOG") or "catalog.yaml",
            log_dir=e.get("RUNLANE_LOG_DIR") or ".runlane/logs",
            concurrency=_env_int(e, "RUNLANE_CONCURRENCY", 16),
            lease_ttl=ttl,
            lease_renew_interval=_env_duration(e, "RUNLANE_LEASE_RENEW_INTERVAL", ttl / 3),
            claim_interval=_env_duration(e, "RUNLANE_CLAIM_INTERVAL", 1.0),
            orphan_check_interval=_env_duration(e, "RUNLANE_ORPHAN_CHECK_INTERVAL", 60.0),
            orphan_grace=_env_duration(e, "RUNLANE_ORPHAN_GRACE", 600.0),
            heartbeat_interval=_env_duration(e, "RUNLANE_HEARTBEAT_INTERVAL", 15.0),
            shutdown_grace=_env_duration(e, "RUNLANE_SHUTDOWN_GRACE", 10.0),
            retry_base=_env_duration(e, "RUNLANE_RETRY_BASE", 5.0),
            pod_fallback=e.get("RUNLANE_POD_FALLBACK") or "inline",
        )
        settings = replace(settings, **{k: v for k, v in overrides.items() if v is not None})
        settings.validate()
        return settings

    def validate(self) -> None:
        if self.lease_renew_interval >= self.lease_ttl:
            raise ConfigError(
                f"RUNLANE_LEASE_RENEW_INTERVAL ({self.lease_renew_interval:g}s) must be shorter "
                f"than RUNLANE_LEASE_TTL ({self.lease_ttl:g}s); a third of it is the default"
            )
        if self.pod_fallback not in ("inline", "refuse"):
            raise ConfigError(
                f"RUNLANE_POD_FALLBACK={self.pod_fallback!r}: expected 'inline' or 'refuse'"
            )

    def public(self) -> dict[str, Any]:
        """The settings with secrets masked, for `runlane config`."""
        from runlane.service.stores import mask_url

        out = asdict(self)
        out["database_url"] = mask_url(self.database_url)
        return out


ENV_NAMES: dict[str, str] = {
    "database_url": "RUNLANE_DATABASE_URL",
    "catalog_path": "RUNLANE_CATALOG",
    "log_dir": "RUNLANE_LOG_DIR",
    "concurrency": "RUNLANE_CONCURRENCY",
    "lease_ttl": "RUNLANE_LEASE_TTL",
    "lease_renew_interval": "RUNLANE_LEASE_RENEW_INTERVAL",
    "claim_interval": "RUNLANE_CLAIM_INTERVAL",
    "orphan_check_interval": "RUNLANE_ORPHAN_CHECK_INTERVAL",
    "orphan_grace": "RUNLANE_ORPHAN_GRACE",
    "heartbeat_interval": "RUNLANE_HEARTBEAT_INTERVAL",
    "shutdown_grace": "RUNLANE_SHUTDOWN_GRACE",
    "retry_base": "RUNLANE_RETRY_BASE",
    "pod_fallback": "RUNLANE_POD_FALLBACK",
}
