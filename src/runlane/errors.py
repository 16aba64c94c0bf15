"""The error tree. Every error runlane raises on purpose derives from `RunlaneError`.

    RunlaneError
    ├── ConfigError              bad configuration (env, flags, URLs)
    ├── CatalogError             the catalog file is missing or invalid (carries every problem)
    ├── InvalidArgument          an argument of a request is not acceptable (a flag, a limit, a time)
    ├── RunRefused               the accept path said no (unknown job, bad params, overlap)
    │   ├── UnknownJob
    │   ├── UnknownChain
    │   ├── ParamError
    │   ├── OverlapRefused
    │   ├── PayloadTooLarge
    │   ├── EventIdTaken
    │   └── ConfirmationRequired
    ├── NotFound                 a run or chain run asked for does not exist
    │   ├── UnknownRun
    │   ├── UnknownChainRun
    │   └── AmbiguousId          a prefix matches several runs (or chain runs)
    ├── NotCancellable           a cancel of a run or chain run that has already ended
    ├── StoreError               the database failed
    │   ├── DatabaseUnavailable  cannot connect, or no answer in time (temporary)
    │   ├── DatabaseConflict     a statement aborted to break a conflict: run it again
    │   ├── SchemaOutOfDate      the database is not at the code's schema version
    │   ├── LeaseLost            a fenced write matched zero rows: the lease is gone
    │   └── InvalidTransition    a state change from a status that does not allow it
    └── ExecutorError            an executor call failed
        ├── TemporaryExecutorError   retry later (API 5xx, timeouts, spawn EAGAIN)
        └── PermanentExecutorError   give up with a reason (forbidden, invalid spec, ENOENT)

Each error has a short stable `code` (used as `error_code` in the run log and in JSON output) and
the CLI's `exit_code`; docs/errors.md lists every code with the HTTP status the API maps it to.
"""

from __future__ import annotations


class RunlaneError(Exception):
    """Something went wrong in runlane."""

    code = "error"
    exit_code = 1

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or self.code).strip())

    @property
    def message(self) -> str:
        return str(self)


class ConfigError(RunlaneError):
    """The configuration is invalid."""

    code = "config_error"


class CatalogError(RunlaneError):
    """The catalog is invalid."""

    code = "catalog_invalid"

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or []


class InvalidArgument(RunlaneError):
    """An argument of a request is not acceptable (a flag's text, a limit, a time, a range)."""

    code = "invalid_argument"
    exit_code = 2


class RunRefused(RunlaneError):
    """The run was refused."""

    code = "refused"
    exit_code = 2


class UnknownJob(RunRefused):
    """No job with that name is in the catalog."""

    code = "unknown_job"


class UnknownChain(RunRefused):
    """No chain with that name is in the catalog."""

    code = "unknown_chain"


class ParamError(RunRefused):
    """The run's params do not match the job's allowlist."""

    code = "param_invalid"


class PayloadTooLarge(RunRefused):
    """The run's params are larger than allowed."""

    code = "payload_too_large"


class OverlapRefused(RunRefused):
    """The job does not allow overlapping runs and one is already queued or running."""

    code = "overlap_refused"
    exit_code = 3

    def __init__(self, message: str, active_run_id: str) -> None:
        super().__init__(message)
        self.active_run_id = active_run_id


class EventIdTaken(RunRefused):
    """An event id given again with another key: the id names the event already recorded."""

    code = "event_id_taken"


class ConfirmationRequired(RunRefused):
    """The job acts on the outside world and needs an explicit confirmation."""

    code = "confirmation_required"


class NotFound(RunlaneError):
    """Not found."""

    code = "not_found"


class UnknownRun(NotFound):
    """No run has that id (or an id starting with that prefix)."""

    code = "unknown_run"


class UnknownChainRun(NotFound):
    """No chain run has that id (or an id starting with that prefix)."""

    code = "unknown_chain_run"


class AmbiguousId(NotFound):
    """The id prefix matches more than one run (or chain run): give more of the id."""

    code = "ambiguous_id"


class NotCancellable(RunlaneError):
    """The run (or chain run) has already ended: there is nothing to cancel."""

    code = "not_cancellable"


class StoreError(RunlaneError):
    """The database operation failed."""

    code = "store_error"


class DatabaseUnavailable(StoreError):
    """The database cannot be reached, or did not answer in time."""

    code = "database_unavailable"


class DatabaseConflict(StoreError):
    """The database aborted a statement to break a conflict with another transaction (a
    deadlock, a serialization failure, a lock wait past `lock_timeout`): nothing was written,
    and running it again is safe."""

    code = "database_conflict"


class SchemaOutOfDate(StoreError):
    """The database schema is not at the version this runlane needs."""

    code = "schema_out_of_date"


class LeaseLost(StoreError):
    """The run's lease is no longer ours: the fenced write matched no row."""

    code = "lease_lost"


class InvalidTransition(StoreError):
    """The run is not in a status that allows this change."""

    code = "invalid_transition"


class ExecutorError(RunlaneError):
    """The executor failed."""

    code = "executor_error"

    def __init__(self, message: str, *, error_code: str | None = None) -> None:
        super().__init__(message)
        if error_code:
            self.code = error_code


class TemporaryExecutorError(ExecutorError):
    """The executor failed for now; try again later."""

    code = "executor_temporary"

    def __init__(
        self, message: str, *, error_code: str | None = None, retry_after: float = 5.0
    ) -> None:
        super().__init__(message, error_code=error_code)
        self.retry_after = retry_after


class PermanentExecutorError(ExecutorError):
    """The executor refused the run for good."""

    code = "executor_permanent"
