"""Effective configuration: flags, then environment, then defaults. `runlane config` prints it."""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from runlane.core.durations import env_duration
from runlane.core.secrets import mask_url
from runlane.errors import ConfigError

# Upper bounds for the whole-number settings: far above any real launcher, and far below what a
# database INTEGER (a LIMIT on PostgreSQL, a bound parameter on SQLite) or a thread pool takes.
MAX_CONCURRENCY = 10_000
MAX_SPAWN_THREADS = 256
MAX_SPAWNERS = 64
# RUNLANE_INLINE_SPAWN: where inline runs are spawned: on worker threads (`spawn_off_loop`; None:
# where they can), on the loop, or (`process`) by a spawner process.
INLINE_SPAWN_MODES: dict[str, bool | None] = {
    "auto": None,
    "thread": True,
    "loop": False,
    "process": None,
}
# RUNLANE_EVENT_LOOP: the event loop `runlane serve` runs on. `auto` (the default) is uvloop where
# it is installed (a dependency on CPython outside Windows), else asyncio's own; `uvloop`
# insists on it. docs/performance.md, "Nineteenth session".
EVENT_LOOPS = ("auto", "uvloop", "asyncio")
# RUNLANE_DB_TIMEOUT: shorter than a second cuts ordinary statements short on a busy server
# (PostgreSQL gets a quarter of it for a lock); longer than five minutes bounds nothing useful.
MIN_DB_TIMEOUT = 1.0
# RUNLANE_LEASE_TTL: shorter, a lease runs out between two renewals (or before a claim commits)
# and its run is taken over and run again, over and over.
MIN_LEASE_TTL = 1.0
_LEASE_TTL_WHY = "a lease must outlast a renewal's round trip to the database"
MAX_DB_TIMEOUT = 300.0
DEFAULT_DB_TIMEOUT = 10.0

_WHOLE_NUMBER = re.compile(r"\s*[-+]?\d+\s*")


def _env_duration(env: Mapping[str, str], name: str, default: float) -> float:
    # Bounded (100 years), so a typo such as 100000000d stops here, not in the launcher.
    return env_duration(env, name, default)


def _env_int(
    env: Mapping[str, str], name: str, default: int, *, maximum: int, minimum: int = 1
) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        if _WHOLE_NUMBER.fullmatch(raw):  # digits beyond what int() will read (4300)
            bound = f"at least {minimum}" if raw.strip().startswith("-") else f"at most {maximum}"
            raise ConfigError(f"{name}={_shown(raw)}: must be {bound}") from exc
        raise ConfigError(f"{name}={_shown(raw)}: expected a whole number") from exc
    if value < minimum:
        raise ConfigError(f"{name}={_shown(raw)}: must be at least {minimum}")
    if value > maximum:
        raise ConfigError(f"{name}={_shown(raw)}: must be at most {maximum}")
    return value


def _env_db_timeout(env: Mapping[str, str], lease_ttl: float) -> float:
    """RUNLANE_DB_TIMEOUT: by default 10 s, or a third of the lease TTL when that is shorter (a
    renewal that gives up then can try again before the lease runs out), but never under 1 s."""
    default = min(DEFAULT_DB_TIMEOUT, max(MIN_DB_TIMEOUT, lease_ttl / 3))
    value = _env_duration(env, "RUNLANE_DB_TIMEOUT", default)
    raw = env.get("RUNLANE_DB_TIMEOUT") or ""
    if value < MIN_DB_TIMEOUT:
        raise ConfigError(f"RUNLANE_DB_TIMEOUT={_shown(raw)}: must be at least 1s")
    if value > MAX_DB_TIMEOUT:
        raise ConfigError(f"RUNLANE_DB_TIMEOUT={_shown(raw)}: must be at most 5m")
    return value


def _env_http_timeout(env: Mapping[str, str]) -> float:
    """RUNLANE_HTTP_REQUEST_TIMEOUT: 30 s by default, at most an hour (a followed log is a
    stream, not a request, and is not bounded by it)."""
    value = _env_duration(env, "RUNLANE_HTTP_REQUEST_TIMEOUT", DEFAULT_HTTP_REQUEST_TIMEOUT)
    if value > MAX_HTTP_REQUEST_TIMEOUT:
        raw = env.get("RUNLANE_HTTP_REQUEST_TIMEOUT") or ""
        raise ConfigError(f"RUNLANE_HTTP_REQUEST_TIMEOUT={_shown(raw)}: must be at most 1h")
    return value


def _shown(raw: str) -> str:
    """`raw` quoted for a message, cut short when it is very long, so the error stays one line."""
    text = repr(raw)
    return f"{text[:60]}…" if len(text) > 60 else text


LOG_LEVELS: dict[str, str] = {
    "debug": "debug",
    "info": "info",
    "warning": "warning",
    "warn": "warning",
    "error": "error",
    "critical": "critical",
}
LOG_FORMATS = ("console", "json")
PRUNE_LAUNCHERS_AFTER = 3600.0


def env_log_level(env: Mapping[str, str]) -> str | None:
    """RUNLANE_LOG_LEVEL, normalised (`WARN` → `warning`); None when unset (the command's
    default: `info` for `runlane serve`, `warning` otherwise)."""
    raw = env.get("RUNLANE_LOG_LEVEL")
    if raw is None or raw.strip() == "":
        return None
    level = LOG_LEVELS.get(raw.strip().lower())
    if level is None:
        raise ConfigError(
            f"RUNLANE_LOG_LEVEL={raw!r}: expected one of debug, info, warning, error, critical"
        )
    return level


def env_log_format(env: Mapping[str, str]) -> str:
    raw = env.get("RUNLANE_LOG_FORMAT")
    if raw is None or raw.strip() == "":
        return "console"
    if raw.strip().lower() not in LOG_FORMATS:
        raise ConfigError(f"RUNLANE_LOG_FORMAT={raw!r}: expected 'console' or 'json'")
    return raw.strip().lower()


def default_launcher_id() -> str:
    """host:pid:random — unique per launcher process, readable in `runlane status`."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


BUSES = ("database", "rabbitmq")  # RUNLANE_BUS (docs/bus.md)
DEFAULT_RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672/"
DEFAULT_LOG_DIR = ".runlane/logs"  # RUNLANE_LOG_DIR unset: relative to the current directory

# The HTTP face (`runlane serve`, `runlane web`): loopback by default, so a launcher started on
# a workstation serves nobody else until its address is chosen on purpose.
DEFAULT_HTTP_ADDR = "127.0.0.1:8080"
HTTP_ADDR_OFF = "off"
DEFAULT_HTTP_REQUEST_TIMEOUT = 30.0
MAX_HTTP_REQUEST_TIMEOUT = 3600.0
MAX_ALERT_INTERVAL = 30.0
HTTP_ROLES = ("viewer", "operator", "admin")
_HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")  # an RFC 9110 token


def parse_http_addr(text: str, *, name: str = "RUNLANE_HTTP_ADDR") -> tuple[str, int] | None:
    """`host:port` (a name, an IPv4 address, or `[IPv6]`), `:port` (every interface: 0.0.0.0),
    or `off` (None: no HTTP). Port 0 asks the system for a free port (tests, benches).

    Every other text is one ConfigError naming `name`."""
    raw = text.strip()
    if raw.lower() == HTTP_ADDR_OFF:
        return None
    hint = "expected HOST:PORT (127.0.0.1:8080, [::1]:8080, :8080 for every interface) or off"
    if "//" in raw:
        raise ConfigError(
            f"{name}={_shown(text)}: is not a host name or address: write HOST:PORT, without http://"
        )
    host, sep, port_text = raw.rpartition(":")
    if not sep or not port_text:
        raise ConfigError(f"{name}={_shown(text)}: {hint}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ConfigError(f"{name}={_shown(text)}: {host!r} is not an IPv6 address") from None
    elif ":" in host:  # a bare IPv6 address: its port would be ambiguous
        raise ConfigError(f"{name}={_shown(text)}: write an IPv6 address in brackets ([::1]:8080)")
    elif host == "":
        host = "0.0.0.0"  # noqa: S104 - `:8080` asks for every interface on purpose
    elif any(c.isspace() or c in "/@?#" for c in host):
        raise ConfigError(f"{name}={_shown(text)}: {host!r} is not a host name or address")
    if not port_text.isdigit() or len(port_text) > 5:
        raise ConfigError(f"{name}={_shown(text)}: the port {port_text!r} is not a number")
    port = int(port_text)
    if port > 65535:
        raise ConfigError(f"{name}={_shown(text)}: the port must be from 0 to 65535")
    return host, port


def _env_list(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    raw = env.get(name) or ""
    return tuple(item.strip() for item in raw.split(",") if item.strip())


def parse_trusted_proxies(
    items: tuple[str, ...], name: str = "RUNLANE_HTTP_TRUSTED_PROXIES"
) -> None:
    """Each item an IP address or a CIDR network (`10.0.0.0/8`); else one ConfigError."""
    for item in items:
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise ConfigError(
                f"{name}: {_shown(item)} is not an IP address or network (10.0.0.0/8, ::1)"
            ) from None


def parse_group_roles(
    text: str, name: str = "RUNLANE_HTTP_GROUP_ROLES"
) -> tuple[tuple[str, str], ...]:
    """`group=role,group=role` (roles: viewer, operator, admin), in the order given."""
    pairs: list[tuple[str, str]] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        group, sep, role = (part.strip() for part in item.partition("="))
        if not sep or not group:
            raise ConfigError(f"{name}: {_shown(item)}: expected GROUP=ROLE (ops=operator)")
        if role.lower() not in HTTP_ROLES:
            raise ConfigError(f"{name}: {_shown(item)}: the role must be viewer, operator or admin")
        pairs.append((group, role.lower()))
    return tuple(pairs)


def _env_header(env: Mapping[str, str], name: str, default: str) -> str:
    raw = (env.get(name) or "").strip()
    return raw or default


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything the launcher and the CLI read from outside. Durations are seconds."""

    database_url: str = "sqlite:///runlane.db"
    catalog_path: str = "catalog.yaml"
    log_dir: str = DEFAULT_LOG_DIR
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
    log_level: str | None = None  # None: `info` for `runlane serve`, `warning` otherwise
    log_format: str = "console"  # or "json": one JSON object per line
    spawn_threads: int = 6  # inline spawns on worker threads (off the loop, or without posix_spawn)
    spawners: int = 2  # spawner processes with RUNLANE_INLINE_SPAWN=process (auto on Linux)
    # Where inline runs are spawned: `process` (two spawner processes that also watch and reap
    # them: Linux), `thread` (worker threads, the GIL released during the vfork wait; needs the
    # guardian and glibc), `loop` (the event-loop thread), `auto` (process where it can be).
    # docs/performance.md, "Off the event loop" and "Spawner processes".
    inline_spawn: str = "auto"
    # The event loop of `runlane serve` (EVENT_LOOPS; `event_loop_factory` resolves it).
    event_loop: str = "auto"
    # The launcher's bound on one PostgreSQL call: past it the database counts as unavailable
    # (the outage handling takes over). PostgreSQL itself gives up on a statement after half of
    # it and on a lock wait after a quarter (adapters/postgres/store.py, `PostgresStore`).
    db_timeout: float = DEFAULT_DB_TIMEOUT
    # The HTTP face (docs/serving.md). `http_addr` is the text given (`off` turns HTTP off);
    # `http_listen` parses it.
    http_addr: str = DEFAULT_HTTP_ADDR
    http_request_timeout: float = DEFAULT_HTTP_REQUEST_TIMEOUT
    http_cors_origins: tuple[str, ...] = ()
    http_trusted_proxies: tuple[str, ...] = ()
    http_user_header: str = "X-Forwarded-User"
    http_groups_header: str = "X-Forwarded-Groups"
    http_group_roles: tuple[tuple[str, str], ...] = ()  # (group, role), in the order given
    # Prometheus metrics (docs/monitoring.md): "" serves /metrics on the HTTP server only (a
    # viewer token); `off` serves it nowhere; HOST:PORT also serves it, without a token, on
    # a listener of its own beside the launcher (`runlane serve`, HTTP on or off).
    metrics_addr: str = ""
    alert_interval: float = 30.0  # the alert rules' evaluation interval (docs/alerts.md)
    # The run log's bus (docs/bus.md): the database itself, or RabbitMQ fed by the outbox.
    bus: str = "database"
    rabbitmq_url: str = DEFAULT_RABBITMQ_URL
    # The management HTTP API (http://user:password@host:15672): when set, the TTL,
    # dead-lettering and delivery limit are a policy, not queue arguments (docs/bus.md).
    rabbitmq_management_url: str = ""
    launcher_id: str = field(default_factory=default_launcher_id)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        e = os.environ if env is None else env
        ttl = env_duration(e, "RUNLANE_LEASE_TTL", 30.0, minimum=MIN_LEASE_TTL, why=_LEASE_TTL_WHY)
        settings = cls(
            database_url=e.get("RUNLANE_DATABASE_URL") or "sqlite:///runlane.db",
            catalog_path=e.get("RUNLANE_CATALOG") or "catalog.yaml",
            log_dir=e.get("RUNLANE_LOG_DIR") or DEFAULT_LOG_DIR,
            concurrency=_env_int(e, "RUNLANE_CONCURRENCY", 16, maximum=MAX_CONCURRENCY),
            lease_ttl=ttl,
            lease_renew_interval=_env_duration(e, "RUNLANE_LEASE_RENEW_INTERVAL", ttl / 3),
            claim_interval=_env_duration(e, "RUNLANE_CLAIM_INTERVAL", 1.0),
            orphan_check_interval=_env_duration(e, "RUNLANE_ORPHAN_CHECK_INTERVAL", 60.0),
            orphan_grace=_env_duration(e, "RUNLANE_ORPHAN_GRACE", 600.0),
            heartbeat_interval=_env_duration(e, "RUNLANE_HEARTBEAT_INTERVAL", 15.0),
            shutdown_grace=_env_duration(e, "RUNLANE_SHUTDOWN_GRACE", 10.0),
            retry_base=_env_duration(e, "RUNLANE_RETRY_BASE", 5.0),
            pod_fallback=e.get("RUNLANE_POD_FALLBACK") or "inline",
            log_level=env_log_level(e),
            log_format=env_log_format(e),
            spawn_threads=_env_int(e, "RUNLANE_SPAWN_THREADS", 6, maximum=MAX_SPAWN_THREADS),
            spawners=_env_int(e, "RUNLANE_SPAWNERS", 2, maximum=MAX_SPAWNERS),
            inline_spawn=(e.get("RUNLANE_INLINE_SPAWN") or "auto").strip(),
            event_loop=(e.get("RUNLANE_EVENT_LOOP") or "auto").strip(),
            db_timeout=_env_db_timeout(e, ttl),
            http_addr=(e.get("RUNLANE_HTTP_ADDR") or "").strip() or DEFAULT_HTTP_ADDR,
            http_request_timeout=_env_http_timeout(e),
            http_cors_origins=_env_list(e, "RUNLANE_HTTP_CORS_ORIGINS"),
            http_trusted_proxies=_env_list(e, "RUNLANE_HTTP_TRUSTED_PROXIES"),
            http_user_header=_env_header(e, "RUNLANE_HTTP_USER_HEADER", "X-Forwarded-User"),
            http_groups_header=_env_header(e, "RUNLANE_HTTP_GROUPS_HEADER", "X-Forwarded-Groups"),
            http_group_roles=parse_group_roles(e.get("RUNLANE_HTTP_GROUP_ROLES") or ""),
            metrics_addr=(e.get("RUNLANE_METRICS_ADDR") or "").strip(),
            alert_interval=_env_duration(e, "RUNLANE_ALERT_INTERVAL", 30.0),
            bus=(e.get("RUNLANE_BUS") or "database").strip().lower(),
            rabbitmq_url=(e.get("RUNLANE_RABBITMQ_URL") or "").strip() or DEFAULT_RABBITMQ_URL,
            rabbitmq_management_url=(e.get("RUNLANE_RABBITMQ_MANAGEMENT_URL") or "").strip(),
        )
        settings = replace(settings, **{k: v for k, v in overrides.items() if v is not None})
        settings.validate()
        return settings

    @property
    def http_listen(self) -> tuple[str, int] | None:
        """Where the HTTP face listens (host, port); None when it is off."""
        return parse_http_addr(self.http_addr)

    @property
    def metrics_enabled(self) -> bool:
        """Whether /metrics is served at all (`RUNLANE_METRICS_ADDR=off` turns it off)."""
        return self.metrics_addr.strip().lower() != HTTP_ADDR_OFF

    @property
    def metrics_listen(self) -> tuple[str, int] | None:
        """The metrics listener's own address (host, port); None when it has none."""
        if not self.metrics_addr.strip():
            return None
        return parse_http_addr(self.metrics_addr, name="RUNLANE_METRICS_ADDR")

    @property
    def launcher_stale_after(self) -> float:
        """Seconds without a heartbeat after which a launcher is shown as stale."""
        return 3 * self.heartbeat_interval

    @property
    def launcher_prune_after(self) -> float:
        """Seconds without a heartbeat after which live launchers delete a launcher's row: an
        hour, or ten heartbeat intervals when that is longer."""
        return max(PRUNE_LAUNCHERS_AFTER, 10 * self.heartbeat_interval)

    def validate(self) -> None:
        if self.lease_ttl < MIN_LEASE_TTL:
            raise ConfigError(
                f"RUNLANE_LEASE_TTL ({self.lease_ttl:g}s): cannot be shorter than 1s "
                f"({_LEASE_TTL_WHY})"
            )
        if self.lease_renew_interval >= self.lease_ttl:
            raise ConfigError(
                f"RUNLANE_LEASE_RENEW_INTERVAL ({self.lease_renew_interval:g}s) must be shorter "
                f"than RUNLANE_LEASE_TTL ({self.lease_ttl:g}s); a third of it is the default"
            )
        if self.pod_fallback not in ("inline", "refuse"):
            raise ConfigError(
                f"RUNLANE_POD_FALLBACK={self.pod_fallback!r}: expected 'inline' or 'refuse'"
            )
        if self.log_level is not None and self.log_level not in LOG_LEVELS.values():
            raise ConfigError(
                f"RUNLANE_LOG_LEVEL={self.log_level!r}: "
                "expected one of debug, info, warning, error, critical"
            )
        if self.log_format not in LOG_FORMATS:
            raise ConfigError(
                f"RUNLANE_LOG_FORMAT={self.log_format!r}: expected 'console' or 'json'"
            )
        if self.spawn_threads < 1:
            raise ConfigError(f"RUNLANE_SPAWN_THREADS={self.spawn_threads!r}: must be at least 1")
        if not 1 <= self.spawners <= MAX_SPAWNERS:
            raise ConfigError(
                f"RUNLANE_SPAWNERS={self.spawners!r}: must be between 1 and {MAX_SPAWNERS}"
            )
        if self.inline_spawn not in INLINE_SPAWN_MODES:
            raise ConfigError(
                f"RUNLANE_INLINE_SPAWN={_shown(self.inline_spawn)}: "
                "expected one of auto, thread, loop, process"
            )
        if self.event_loop not in EVENT_LOOPS:
            raise ConfigError(
                f"RUNLANE_EVENT_LOOP={_shown(self.event_loop)}: expected one of auto, uvloop, asyncio"
            )
        if not MIN_DB_TIMEOUT <= self.db_timeout <= MAX_DB_TIMEOUT:
            raise ConfigError(
                f"RUNLANE_DB_TIMEOUT ({self.db_timeout:g}s): must be between 1s and 5m"
            )
        self.http_listen  # noqa: B018 - raises the address's ConfigError now, not at serve time
        self.metrics_listen  # noqa: B018 - the same for the metrics address
        if not 0 < self.http_request_timeout <= MAX_HTTP_REQUEST_TIMEOUT:
            raise ConfigError(
                f"RUNLANE_HTTP_REQUEST_TIMEOUT ({self.http_request_timeout:g}s): "
                "must be more than 0s and at most 1h"
            )
        parse_trusted_proxies(self.http_trusted_proxies)
        if not 0 < self.alert_interval <= MAX_ALERT_INTERVAL:
            raise ConfigError(
                f"RUNLANE_ALERT_INTERVAL ({self.alert_interval:g}s): must be more than 0s and "
                "at most 30s (the alert rules are evaluated at least that often)"
            )
        if self.bus not in BUSES:
            raise ConfigError(f"RUNLANE_BUS={_shown(self.bus)}: expected 'database' or 'rabbitmq'")
        if not re.fullmatch(r"amqps?://[^\s/]+(/\S*)?", self.rabbitmq_url):
            raise ConfigError(
                f"RUNLANE_RABBITMQ_URL={mask_url(self.rabbitmq_url)!r}: expected "
                "amqp://user:password@host:port/vhost (or amqps://)"
            )
        if self.rabbitmq_management_url and not re.fullmatch(
            r"https?://[^\s/]+(/\S*)?", self.rabbitmq_management_url
        ):
            raise ConfigError(
                "RUNLANE_RABBITMQ_MANAGEMENT_URL="
                f"{mask_url(self.rabbitmq_management_url)!r}: expected "
                "http://user:password@host:15672 (or https://), or unset"
            )
        for header_env, header in (
            ("RUNLANE_HTTP_USER_HEADER", self.http_user_header),
            ("RUNLANE_HTTP_GROUPS_HEADER", self.http_groups_header),
        ):
            if not _HEADER_NAME.fullmatch(header):
                raise ConfigError(f"{header_env}={_shown(header)}: not an HTTP header name")
        for origin in self.http_cors_origins:
            if origin != "*" and not re.fullmatch(r"https?://[^/\s]+", origin):
                raise ConfigError(
                    f"RUNLANE_HTTP_CORS_ORIGINS: {_shown(origin)} is not an origin "
                    "(https://ui.example.com, no path)"
                )

    def public(self) -> dict[str, Any]:
        """The settings with secrets masked, for `runlane config`."""
        out = asdict(self)
        out["database_url"] = mask_url(self.database_url)
        out["rabbitmq_url"] = mask_url(self.rabbitmq_url)
        out["rabbitmq_management_url"] = mask_url(self.rabbitmq_management_url)
        out["http_cors_origins"] = list(self.http_cors_origins)
        out["http_trusted_proxies"] = list(self.http_trusted_proxies)
        out["http_group_roles"] = dict(self.http_group_roles)
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
    "log_level": "RUNLANE_LOG_LEVEL",
    "log_format": "RUNLANE_LOG_FORMAT",
    "spawn_threads": "RUNLANE_SPAWN_THREADS",
    "spawners": "RUNLANE_SPAWNERS",
    "inline_spawn": "RUNLANE_INLINE_SPAWN",
    "event_loop": "RUNLANE_EVENT_LOOP",
    "db_timeout": "RUNLANE_DB_TIMEOUT",
    "http_addr": "RUNLANE_HTTP_ADDR",
    "http_request_timeout": "RUNLANE_HTTP_REQUEST_TIMEOUT",
    "http_cors_origins": "RUNLANE_HTTP_CORS_ORIGINS",
    "http_trusted_proxies": "RUNLANE_HTTP_TRUSTED_PROXIES",
    "http_user_header": "RUNLANE_HTTP_USER_HEADER",
    "http_groups_header": "RUNLANE_HTTP_GROUPS_HEADER",
    "http_group_roles": "RUNLANE_HTTP_GROUP_ROLES",
    "metrics_addr": "RUNLANE_METRICS_ADDR",
    "alert_interval": "RUNLANE_ALERT_INTERVAL",
    "bus": "RUNLANE_BUS",
    "rabbitmq_url": "RUNLANE_RABBITMQ_URL",
    "rabbitmq_management_url": "RUNLANE_RABBITMQ_MANAGEMENT_URL",
}
