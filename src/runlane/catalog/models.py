"""The catalog as typed models: what `catalog.yaml` may say, and jobs resolved against defaults."""

from __future__ import annotations

import difflib
import hashlib
import re
import zoneinfo
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, time
from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    PrivateAttr,
    StrictBool,
    StrictInt,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from runlane.catalog.params import PARAM_SPEC_PATTERN, ParamSpec
from runlane.core.cron import CronExpr, parse_cron
from runlane.core.durations import MAX_DURATION_SECONDS, MAX_DURATION_TEXT, parse_duration
from runlane.core.sizes import format_size, parse_size
from runlane.errors import UnknownJob

ExecutorName = Literal["inline", "pod", "slurm"]
OverlapPolicy = Literal["forbid", "queue", "allow"]
AlertLevel = Literal["none", "info", "warning", "critical"]

NAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]*")
NAME_MAX = 63
NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,62}$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
DURATION_PATTERN = r"^\s*(\d+(\.\d+)?\s*(ms|s|m|h|d|w)?\s*)+$"
RESERVED_FIELDS = ("class", "group", "fan_out", "approval")
# Upper bounds for the catalog's whole numbers, so that a typo (`max_attempts: 30000000000`) is a
# catalog error rather than an overflow in a database INTEGER column when a run is written.
MAX_ATTEMPTS = 1000
MAX_CONCURRENT_PODS = 10_000
# An inline run's log file is cut at `log_max_bytes` (then only its last bytes are kept). The
# floor keeps a marker line and some output in the file; the ceiling catches a unit typo.
LOG_MAX_BYTES_DEFAULT = 10 * 1024 * 1024
LOG_MAX_BYTES_MIN = 1024
LOG_MAX_BYTES_MAX = 1024**4


def is_valid_name(name: str) -> bool:
    """Job, chain, step, profile and season names: lowercase, digits, `.`, `_`, `-`; ≤ 63 chars."""
    return len(name) <= NAME_MAX and NAME_RE.fullmatch(name) is not None


def _duration(value: object) -> object:
    if isinstance(value, str | int | float):
        # Bounded, so a typo such as `99999999d` is a catalog error, not an OverflowError later.
        return parse_duration(value, maximum=MAX_DURATION_SECONDS)
    return value  # let pydantic say what type it is


# The check that makes a field a duration: the loader looks for it to say a duration's bound.
DURATION_CHECK = BeforeValidator(_duration)

_DURATION_SCHEMA = {
    "anyOf": [
        {"type": "string", "pattern": DURATION_PATTERN, "examples": ["30s", "10m", "2h", "1d"]},
        {"type": "number", "minimum": 0},
    ],
    "description": (
        "A duration such as 30s, 10m, 1h30m, 2h or 1d; a bare number means seconds. "
        f"At most {MAX_DURATION_TEXT}."
    ),
}

Duration = Annotated[float, DURATION_CHECK, Field(ge=0), WithJsonSchema(_DURATION_SCHEMA)]
"""A duration in seconds, written `30s`, `10m`, `2h`, `1d` (or a number of seconds)."""

PositiveDuration = Annotated[float, DURATION_CHECK, Field(gt=0), WithJsonSchema(_DURATION_SCHEMA)]


def _log_size(value: object) -> object:
    if not isinstance(value, str | int | float):
        return value  # let pydantic say what type it is
    size = parse_size(value)  # a bool is refused there too
    if not LOG_MAX_BYTES_MIN <= size <= LOG_MAX_BYTES_MAX:
        raise ValueError(
            f"a log size must be from {format_size(LOG_MAX_BYTES_MIN)} to "
            f"{format_size(LOG_MAX_BYTES_MAX)}, got {value!r}"
        )
    return size


_SIZE_SCHEMA = {
    "anyOf": [
        {
            "type": "string",
            "pattern": r"^\s*\d+(\.\d+)?\s*([kKmMgGtT][iI]?)?[bB]?\s*$",
            "examples": ["512KiB", "10MiB", "100MB", "1GiB"],
        },
        {"type": "integer", "minimum": LOG_MAX_BYTES_MIN},
    ],
    "description": (
        "A size such as 512KiB, 10MiB, 100MB or 1GiB (KiB/MiB/GiB are powers of 1024, "
        "kB/MB/GB of 1000); a bare number means bytes. From 1KiB to 1TiB."
    ),
}

LogSize = Annotated[
    int,
    BeforeValidator(_log_size),
    WithJsonSchema(_SIZE_SCHEMA),
]
"""A log file's size cap in bytes, written `10MiB`, `100MB` (or a number of bytes)."""


def _scalar_to_str(value: object) -> object:
    # `cpu: 1` and `PORT: 8080` are strings to Kubernetes and to a process environment.
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


ScalarStr = Annotated[
    str,
    BeforeValidator(_scalar_to_str, json_schema_input_type=str | int | float),
]


def _passable(value: str) -> str:
    # What exec and the environment cannot carry: each run would fail at launch (a permanent
    # `invalid_spec`) after the catalog passed its check.
    if "\x00" in value:
        raise ValueError(f"a NUL byte (\\0) cannot be passed to a process, got {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"a lone surrogate ({value[exc.start]!r}) cannot be passed to a process, got {value!r}"
        ) from None
    return value


ProcessStr = Annotated[str, AfterValidator(_passable)]
"""A command argument or an environment value: no NUL byte, no lone surrogate."""

EnvValue = Annotated[ScalarStr, AfterValidator(_passable)]

ParamSpecField = Annotated[
    ParamSpec,
    PlainValidator(ParamSpec.parse),
    PlainSerializer(str, return_type=str),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": PARAM_SPEC_PATTERN,
            "description": "int, float, bool, str or choice[a,b,c]; a trailing ? makes it optional",
            "examples": ["int", "int?", "bool?", "choice[fast,full]"],
        }
    ),
]


def _check_zone(name: str) -> str:
    if name == "localtime":
        # A link to the host's /etc/localtime: launchers on hosts (or in containers) set to other
        # zones would put the same schedule's slots at other instants, each a run of its own.
        raise ValueError(
            "time zone 'localtime' is whatever the host is set to, which differs between hosts "
            "and containers; name the zone, e.g. Europe/Berlin or UTC"
        )
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(
            f"unknown time zone {name!r}; use an IANA name such as UTC or America/Chicago"
        ) from None
    return name


def _check_cron(expr: str) -> str:
    parse_cron(expr)  # ValueError carries the plain message
    return expr


def _name_map_extra(kind: str) -> dict[str, Any]:
    return {
        "propertyNames": {"pattern": NAME_PATTERN},
        "description": f"{kind} by name (lowercase letters, digits, '.', '_', '-'; at most 63)",
    }


def _default(seconds: float, spelled: str) -> Any:
    """A duration field's default, shown in the JSON Schema the way a person writes it."""
    return Field(seconds, json_schema_extra={"default": spelled})


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


_SECONDS_TEXT = re.compile(r"[-+]?[0-9]+(\.[0-9]*)?")


def _season_date(value: object) -> object:
    # pydantic would read a number (or its text) as seconds since 1970: `end: 86400` is 1970-01-02.
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if number or (isinstance(value, str) and _SECONDS_TEXT.fullmatch(value)):
        raise ValueError(f"expected a date as YYYY-MM-DD, got {value!r}")
    return value


SeasonDate = Annotated[date, BeforeValidator(_season_date)]


class Season(_Model):
    """A window of dates (inclusive) in which season-restricted schedules fire."""

    start: SeasonDate
    end: SeasonDate

    @model_validator(mode="after")
    def _ordered(self) -> Season:
        if self.start > self.end:
            raise ValueError(f"season starts ({self.start}) after it ends ({self.end})")
        return self

    def contains(self, day: date) -> bool:
        return self.start <= day <= self.end


class GlobalSettings(_Model):
    """Launcher-wide limits and the named season windows."""

    max_concurrent_pods: StrictInt = Field(10, ge=0, le=MAX_CONCURRENT_PODS)
    max_deadline: PositiveDuration = _default(7200.0, "2h")
    start_timeout: PositiveDuration = _default(600.0, "10m")
    manual_queue_ttl: PositiveDuration = _default(1800.0, "30m")
    kill_grace: Duration = _default(30.0, "30s")
    timezone: str = "UTC"
    seasons: dict[str, Season] = Field(
        default_factory=dict, json_schema_extra=_name_map_extra("Seasons")
    )

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        return _check_zone(value)


def _volume_from_name(value: object) -> object:
    if isinstance(value, str):
        return {"name": value, "pvc": value}
    if not isinstance(value, dict):
        raise ValueError(
            "a volume is a PVC name or a mapping {name, mountPath, pvc|secret|configMap, readOnly}"
        )
    return value


class VolumeSpec(_Model):
    """A volume to mount. A bare name means a PersistentVolumeClaim of that name."""

    name: str = Field(min_length=1)
    mount_path: str | None = Field(None, alias="mountPath")
    pvc: str | None = None
    secret: str | None = None
    config_map: str | None = Field(None, alias="configMap")
    read_only: StrictBool = Field(False, alias="readOnly")

    @model_validator(mode="after")
    def _one_source(self) -> VolumeSpec:
        sources = [s for s in (self.pvc, self.secret, self.config_map) if s is not None]
        if len(sources) > 1:
            raise ValueError("a volume takes only one of pvc, secret or configMap")
        return self

    @property
    def effective_mount_path(self) -> str:
        return self.mount_path or f"/mnt/{self.name}"


Volume = Annotated[
    VolumeSpec, BeforeValidator(_volume_from_name, json_schema_input_type=str | VolumeSpec)
]


# A memory size as Kubernetes writes it (an emptyDir's `sizeLimit`): a number and its unit.
_K8S_SIZE = re.compile(r"[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)")
_SCRATCH_HELP = "true, false, or the volume's size limit as Kubernetes writes it: 512Mi, 2Gi"


def _scratch(value: object) -> object:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and _K8S_SIZE.fullmatch(value) and float(value.rstrip("KMGTPEik")):
        return value
    raise ValueError(f"scratch is {_SCRATCH_HELP}; got {value!r}")


Scratch = Annotated[
    bool | str,
    BeforeValidator(_scratch),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "boolean"},
                {"type": "string", "pattern": f"^{_K8S_SIZE.pattern}$", "examples": ["512Mi"]},
            ],
            "description": (
                "Pods only: an in-memory emptyDir mounted at /scratch (its use counts against "
                f"the pod's memory limit); {_SCRATCH_HELP}."
            ),
        }
    ),
]


class Resources(_Model):
    """Kubernetes resource requests and limits, e.g. `{cpu: 100m, memory: 128Mi}`."""

    requests: dict[str, ScalarStr] = Field(default_factory=dict)
    limits: dict[str, ScalarStr] = Field(default_factory=dict)


# sbatch options a `slurm.extra_args` item may name. Not listed on purpose: what runlane sets
# itself (--job-name, --comment, --time, --output, --error, --open-mode, --export, --requeue,
# --parsable, --chdir via `workdir`) and what would change what a run is (--array, --wrap,
# --dependency, --hold, --deadline, --kill-on-invalid-dep, --wait). docs/slurm.md lists them.
SBATCH_EXTRA_OPTIONS = frozenset(
    {
        "--begin", "--exclusive", "--exclude", "--nodelist", "--ntasks", "--ntasks-per-node",
        "--mem-per-cpu", "--mem-per-gpu", "--gpus", "--gpus-per-node", "--gpus-per-task",
        "--cpus-per-gpu", "--licenses", "--reservation", "--tmp", "--hint", "--nice",
        "--mail-type", "--mail-user", "--wckey", "--signal", "--cluster-constraint",
        "--core-spec", "--threads-per-core", "--sockets-per-node", "--cores-per-socket",
        "--switches", "--network", "--prefer", "--mcs-label", "--spread-job",
        "--time-min", "--distribution", "--overcommit", "--oversubscribe", "--power",
        "--priority", "--propagate", "--use-min-nodes", "--get-user-env",
    }
)  # fmt: skip
# Of those, the ones sbatch takes without a value (`--exclusive`, `--nice`); every other one
# needs `=value`: sbatch would take the next argument, the batch script, as its value.
SBATCH_FLAG_OPTIONS = frozenset(
    {
        "--exclusive", "--overcommit", "--oversubscribe", "--spread-job", "--use-min-nodes",
        "--get-user-env", "--propagate", "--nice",
    }
)  # fmt: skip
_SBATCH_ARG = re.compile(r"^(--[a-z][a-z-]*)(=[^\x00-\x1f]+)?$")


def _sbatch_extra_arg(value: object) -> object:
    if not isinstance(value, str):
        raise ValueError(
            f"an extra sbatch argument is one string such as --exclusive, got {value!r}"
        )
    m = _SBATCH_ARG.match(value)
    if m is None:
        raise ValueError(
            f"extra sbatch argument {value!r} must be --option or --option=value (one item each)"
        )
    if m.group(1) not in SBATCH_EXTRA_OPTIONS:
        raise ValueError(
            f"sbatch option {m.group(1)} is not allowed in extra_args: runlane sets it itself or "
            "it changes how a run is tracked (docs/slurm.md lists the allowed options)"
        )
    if m.group(2) is None and m.group(1) not in SBATCH_FLAG_OPTIONS:
        raise ValueError(
            f"sbatch option {m.group(1)} needs a value: write {m.group(1)}=VALUE as one item"
        )
    return value


SbatchArg = Annotated[str, BeforeValidator(_sbatch_extra_arg)]
_NO_CONTROL = r"^[^\x00-\x1f]+$"


class SlurmSpec(_Model):
    """How a Slurm job is requested (`sbatch` options); in a profile, and per job on top."""

    partition: str | None = Field(None, pattern=_NO_CONTROL)
    account: str | None = Field(None, pattern=_NO_CONTROL)
    qos: str | None = Field(None, pattern=_NO_CONTROL)
    cpus: StrictInt | None = Field(None, ge=1, description="CPUs per task (--cpus-per-task).")
    # [0-9], not \d: the pattern engine counts other scripts' digits (`٣`), which sbatch does not.
    memory: ScalarStr | None = Field(
        None, pattern=r"^[0-9]+[KMGT]?$", description="Memory per node (--mem), e.g. 4G or 512M."
    )
    gres: str | None = Field(None, pattern=_NO_CONTROL, description="e.g. gpu:1")
    nodes: ScalarStr | None = Field(
        None, pattern=r"^[0-9]+(-[0-9]+)?$", description="A node count (2) or range (MIN-MAX)."
    )
    constraint: str | None = Field(None, pattern=_NO_CONTROL)
    workdir: str | None = Field(None, pattern=_NO_CONTROL, description="The job's directory.")
    extra_args: list[SbatchArg] | None = Field(
        None, description="More sbatch options, from an allowlist (docs/slurm.md)."
    )

    @field_validator("nodes")
    @classmethod
    def _node_range_in_order(cls, value: str | None) -> str | None:
        # sbatch refuses `--nodes=2-1` only when the run is submitted: a failed run, not a
        # catalog error.
        if value is not None and "-" in value:
            low, high = value.split("-")
            if int(low) > int(high):
                raise ValueError(f"a node range is MIN-MAX with MIN at most MAX, got {value!r}")
        return value


class Profile(_Model):
    """How a pod (or other container) runs: image, secrets, identity, volumes, placement, env."""

    image: str | None = Field(None, description="Container image; may contain ${VAR}.")
    secrets: list[str] = Field(default_factory=list)
    service_account: str | None = Field(None, alias="serviceAccount")
    volumes: list[Volume] = Field(default_factory=list)
    resources: Resources = Field(default_factory=Resources)
    node_selector: dict[str, ScalarStr] = Field(default_factory=dict, alias="nodeSelector")
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    namespace: str | None = None
    env: dict[Annotated[str, Field(pattern=ENV_NAME_PATTERN)], EnvValue] = Field(
        default_factory=dict
    )
    slurm: SlurmSpec | None = None
    scratch: Scratch | None = None


class Defaults(_Model):
    """What a job gets for every field it leaves out."""

    executor: ExecutorName = "pod"
    overlap: OverlapPolicy = "forbid"
    max_attempts: StrictInt = Field(1, ge=1, le=MAX_ATTEMPTS)
    deadline: PositiveDuration = _default(3600.0, "1h")
    alert: AlertLevel = "warning"
    kill_grace: Duration | None = None
    log_max_bytes: LogSize = Field(LOG_MAX_BYTES_DEFAULT, json_schema_extra={"default": "10MiB"})


class Schedule(_Model):
    """A cron schedule. `tz` defaults to `global.timezone`; `catch_up` is how late a missed slot
    may still fire."""

    cron: str
    tz: str | None = None
    catch_up: Duration = _default(0.0, "0s")

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str) -> str:
        return _check_cron(value)

    @field_validator("tz")
    @classmethod
    def _known_zone(cls, value: str | None) -> str | None:
        return value if value is None else _check_zone(value)

    @property
    def cron_expr(self) -> CronExpr:
        return parse_cron(self.cron)


class EventTrigger(_Model):
    """Start a run when an event with this key arrives; `debounce` folds bursts into one run."""

    key: str = Field(min_length=1, pattern=r"^\S+$")

    @field_validator("key", mode="before")
    @classmethod
    def _no_spaces(cls, value: object) -> object:
        if isinstance(value, str) and (not value or any(c.isspace() for c in value)):
            raise ValueError(
                f"an event key is one word such as rumor.signal_created, got {value!r}"
            )
        return value

    debounce: Duration = _default(0.0, "0s")


def _command(value: object) -> object:
    if isinstance(value, str):
        raise ValueError(
            "command must be an argv list, e.g. [python, -m, app]; runlane never runs a shell"
        )
    return value


class _Reserved(_Model):
    """Fields reserved for a later version: they parse, and the loader rejects them."""

    class_: SkipJsonSchema[Any] = Field(None, alias="class")
    group: SkipJsonSchema[Any] = None
    fan_out: SkipJsonSchema[Any] = None
    approval: SkipJsonSchema[Any] = None


class Job(_Reserved):
    """One runnable job. Fields left out come from `defaults` (and `global`)."""

    command: Annotated[list[ProcessStr], BeforeValidator(_command)] = Field(min_length=1)
    profile: str | None = None
    description: str | None = None
    params: dict[str, ParamSpecField] = Field(default_factory=dict)
    max_attempts: StrictInt | None = Field(None, ge=1, le=MAX_ATTEMPTS)
    alert: AlertLevel | None = None
    acts: StrictBool = False
    schedules: list[Schedule] = Field(default_factory=list)
    on_event: list[EventTrigger] = Field(default_factory=list)
    executor: ExecutorName | None = None
    deadline: PositiveDuration | None = None
    overlap: OverlapPolicy | None = None
    kill_grace: Duration | None = None
    log_max_bytes: LogSize | None = None
    env: dict[Annotated[str, Field(pattern=ENV_NAME_PATTERN)], EnvValue] = Field(
        default_factory=dict
    )
    slurm: SlurmSpec | None = Field(None, description="Slurm options on top of the profile's.")


class ChainSchedule(Schedule):
    """A chain's schedule; with `seasons`, slots fire only inside those season windows."""

    seasons: list[str] = Field(default_factory=list)


class StepDependency(_Model):
    """Run after `step`: on `success` only (the chain stops on failure), or on any `finish`."""

    step: str
    on: Literal["success", "finish"] = "success"


_LATEST_RE = re.compile(r"([01]?[0-9]|2[0-3]):([0-5][0-9])")


def _check_latest(value: str | None) -> str | None:
    if value is not None and not _LATEST_RE.fullmatch(value):
        raise ValueError(f"latest must be a time of day as HH:MM (24-hour), got {value!r}")
    return value


def _dependency(value: object) -> object:
    if isinstance(value, str):
        raise ValueError(
            f"write each `after` entry as {{step: {value}, on: success}} (or on: finish)"
        )
    return value


Dependency = Annotated[
    StepDependency, BeforeValidator(_dependency, json_schema_input_type=StepDependency)
]


class ChainStep(_Reserved):
    """One step of a chain: the job it runs (default: the step's name) and what it waits for."""

    job: str | None = None
    after: list[Dependency] = Field(default_factory=list)
    latest: str | None = Field(
        None, description="Start by this local time (HH:MM) even if a parent is still running."
    )

    @field_validator("latest")
    @classmethod
    def _valid_latest(cls, value: str | None) -> str | None:
        return _check_latest(value)

    @property
    def latest_time(self) -> time | None:
        if self.latest is None:
            return None
        hours, minutes = self.latest.split(":")
        return time(int(hours), int(minutes))


class Chain(_Model):
    """A named workflow: steps with dependencies, optionally on a schedule."""

    description: str | None = None
    schedule: ChainSchedule | None = None
    max_duration: PositiveDuration | None = None
    steps: dict[str, ChainStep] = Field(min_length=1, json_schema_extra=_name_map_extra("Steps"))

    @model_validator(mode="before")
    @classmethod
    def _steps_name_their_job(cls, data: Any) -> Any:
        # A step without `job` runs the job of the same name; fill it in so readers need not know.
        if isinstance(data, dict) and isinstance(data.get("steps"), dict):
            steps = {
                name: (
                    {**body, "job": name} if isinstance(body, dict) and "job" not in body else body
                )
                for name, body in data["steps"].items()
            }
            data = {**data, "steps": steps}
        return data

    def step_job(self, step_name: str) -> str:
        """The job a step runs."""
        return self.steps[step_name].job or step_name


# --- alerts (docs/alerts.md) ------------------------------------------------------------------

NotifyLevel = Literal["info", "warning", "critical"]
NOTIFY_FORMATS = ("runlane", "alertmanager")
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_URL_START = re.compile(r"(https?://|\$\{)", re.IGNORECASE)


def _check_url(value: str | None, field_name: str) -> str | None:
    """An http(s) URL, or one that starts with a `${VAR}` (expanded by the launcher)."""
    if value is None:
        return None
    text = value.strip()
    if not _URL_START.match(text) or any(c.isspace() for c in text):
        raise ValueError(f"{field_name} must be an http:// or https:// URL, got {value!r}")
    return text


def _default_levels() -> list[NotifyLevel]:
    return ["warning", "critical"]


class NotifyTarget(_Model):
    """One place notifications go: an ntfy topic URL or a webhook URL, and the levels it takes.
    Values may use `${VAR}` from the launcher's environment (tokens and secrets especially)."""

    ntfy: str | None = Field(None, description="The ntfy topic URL (https://ntfy.sh/my-topic).")
    webhook: str | None = Field(None, description="A URL that receives a JSON POST.")
    name: str | None = Field(
        None,
        pattern=NAME_PATTERN,
        description="How runlane names the target (status, alerts); default: kind and host.",
    )
    token: str | None = Field(None, description="ntfy: an access token sent as Bearer.")
    secret: str | None = Field(
        None, description="webhook: signs each body (X-Runlane-Signature: sha256=HMAC)."
    )
    format: Literal["runlane", "alertmanager"] | None = Field(
        None, description="webhook: the body, runlane's JSON or Alertmanager's webhook (v4)."
    )
    levels: list[NotifyLevel] = Field(
        default_factory=_default_levels,
        min_length=1,
        json_schema_extra={"default": ["warning", "critical"]},
    )

    @model_validator(mode="after")
    def _one_kind(self) -> NotifyTarget:
        if (self.ntfy is None) == (self.webhook is None):
            raise ValueError("a notify target has exactly one of ntfy: URL or webhook: URL")
        _check_url(self.ntfy, "ntfy")
        _check_url(self.webhook, "webhook")
        if self.ntfy is not None and (self.secret is not None or self.format is not None):
            raise ValueError("secret and format are webhook settings; an ntfy target takes token")
        if self.webhook is not None and self.token is not None:
            raise ValueError("token is an ntfy setting; a webhook target takes secret")
        return self

    @property
    def kind(self) -> str:
        return "ntfy" if self.ntfy is not None else "webhook"

    @property
    def url(self) -> str:
        return self.ntfy if self.ntfy is not None else (self.webhook or "")

    @property
    def target_name(self) -> str:
        """`name`, or the kind, the URL's host and a short hash of the whole URL as written
        (`ntfy:ntfy.sh#3f9a1c`): an ntfy topic is as good as a password, so no name shows it."""
        if self.name is not None:
            return self.name
        rest = self.url.split("://", 1)[-1]
        host = rest.split("/", 1)[0].split("?", 1)[0].rsplit("@", 1)[-1]
        digest = hashlib.sha256(self.url.encode()).hexdigest()[:6]
        return f"{self.kind}:{host}#{digest}"


class AlertSettings(_Model):
    """Where alerts go and when: targets, the stale-heartbeat age, repeats, links, dead man."""

    notify: list[NotifyTarget] = Field(default_factory=list)
    heartbeat_stale: PositiveDuration = _default(300.0, "5m")
    repeat: PositiveDuration | None = Field(
        None, description="Notify a still-open incident again this often (default: never)."
    )
    ui_url: str | None = Field(
        None, description="The web UI's base URL, for links to runs (https://runlane.example)."
    )
    deadman_url: str | None = Field(
        None, description="A URL each launcher GETs every minute (a dead man's switch)."
    )

    @field_validator("ui_url")
    @classmethod
    def _ui_url(cls, value: str | None) -> str | None:
        return _check_url(value, "ui_url")

    @field_validator("deadman_url")
    @classmethod
    def _deadman_url(cls, value: str | None) -> str | None:
        return _check_url(value, "deadman_url")

    @model_validator(mode="after")
    def _distinct_names(self) -> AlertSettings:
        seen: set[str] = set()
        for target in self.notify:
            name = target.target_name
            if name in seen:
                raise ValueError(
                    f"two notify targets are both named {name!r}: give one a distinct name"
                )
            seen.add(name)
        return self


def env_references(text: str) -> list[str]:
    """The `${VAR}` names in `text`, in order."""
    return [m.group(1) for m in _ENV_REF.finditer(text)]


def expand_env(text: str, environ: Mapping[str, str]) -> str:
    """`${VAR}` in `text` from `environ`; ValueError naming every unset one."""
    missing = sorted({name for name in env_references(text) if name not in environ})
    if missing:
        raise ValueError(f"{', '.join(missing)} not set in the environment")
    return _ENV_REF.sub(lambda m: environ[m.group(1)], text)


@dataclass(frozen=True, slots=True)
class ResolvedJob:
    """A job with every default filled in: what the launcher actually uses to run it."""

    name: str
    command: tuple[str, ...]
    profile: str | None
    profile_spec: Profile | None
    executor: ExecutorName
    overlap: OverlapPolicy
    max_attempts: int
    deadline_seconds: float
    kill_grace_seconds: float
    alert: AlertLevel
    acts: bool
    params: Mapping[str, ParamSpec]
    schedules: tuple[Schedule, ...]
    on_event: tuple[EventTrigger, ...]
    description: str | None
    env: Mapping[str, str]
    queue_ttl_seconds: float
    log_max_bytes: int = LOG_MAX_BYTES_DEFAULT  # the inline executor's cap on the log file


class Catalog(_Model):
    """The whole catalog file. Load it with `load_catalog`, which reports every problem at once."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        defer_build=True,
        title="runlane catalog",
        json_schema_extra={"description": "The runlane job catalog (catalog.yaml), version 1."},
    )

    version: StrictInt = Field(description="Catalog format version; only 1 exists.")
    global_: GlobalSettings = Field(default_factory=GlobalSettings, alias="global")
    profiles: dict[str, Profile] = Field(
        default_factory=dict, json_schema_extra=_name_map_extra("Profiles")
    )
    defaults: Defaults = Field(default_factory=Defaults)
    jobs: dict[str, Job] = Field(default_factory=dict, json_schema_extra=_name_map_extra("Jobs"))
    chains: dict[str, Chain] = Field(
        default_factory=dict, json_schema_extra=_name_map_extra("Chains")
    )
    alerts: AlertSettings = Field(default_factory=AlertSettings)
    # The catalog is frozen, so a resolved job never changes: resolve each once (it is on the
    # launcher's per-run path).
    _resolved: dict[str, ResolvedJob] = PrivateAttr(default_factory=dict)

    def job_names(self) -> list[str]:
        """Every job's name, sorted."""
        return sorted(self.jobs)

    def resolve(self, name: str) -> ResolvedJob:
        """The job with defaults merged in. Raises UnknownJob (with a did-you-mean hint)."""
        cached = self._resolved.get(name)
        if cached is None:
            cached = self._resolved[name] = self._resolve(name)
        return cached

    def _resolve(self, name: str) -> ResolvedJob:
        job = self.jobs.get(name)
        if job is None:
            hint = ""
            close = difflib.get_close_matches(name, list(self.jobs), n=1)
            if close:
                hint = f" (did you mean {close[0]!r}?)"
            raise UnknownJob(f"unknown job {name!r}{hint}")
        g, d = self.global_, self.defaults
        deadline = job.deadline if job.deadline is not None else d.deadline
        kill_grace = job.kill_grace if job.kill_grace is not None else d.kill_grace
        schedules = tuple(
            s if s.tz is not None else s.model_copy(update={"tz": g.timezone})
            for s in job.schedules
        )
        return ResolvedJob(
            name=name,
            command=tuple(job.command),
            profile=job.profile,
            profile_spec=_with_job_slurm(
                self.profiles.get(job.profile) if job.profile else None, job.slurm
            ),
            executor=job.executor or d.executor,
            overlap=job.overlap or d.overlap,
            max_attempts=job.max_attempts if job.max_attempts is not None else d.max_attempts,
            deadline_seconds=min(deadline, g.max_deadline),
            kill_grace_seconds=kill_grace if kill_grace is not None else g.kill_grace,
            alert=job.alert or d.alert,
            acts=job.acts,
            params=MappingProxyType(dict(job.params)),
            schedules=schedules,
            on_event=tuple(job.on_event),
            description=job.description,
            env=MappingProxyType(dict(job.env)),
            queue_ttl_seconds=g.manual_queue_ttl,
            log_max_bytes=job.log_max_bytes if job.log_max_bytes is not None else d.log_max_bytes,
        )


def _with_job_slurm(profile: Profile | None, slurm: SlurmSpec | None) -> Profile | None:
    """The profile a job runs with: its `slurm` fields over the profile's (field by field)."""
    if slurm is None:
        return profile
    base = profile if profile is not None else Profile()
    merged = {
        **(base.slurm.model_dump(exclude_none=True) if base.slurm is not None else {}),
        **slurm.model_dump(exclude_none=True),
    }
    return base.model_copy(update={"slurm": SlurmSpec(**merged)})
