"""The error tree. Every error runlane raises on purpose derives from `RunlaneError`.

    RunlaneError
    ├── ConfigError              bad configuration (env, flags, URLs)
    ├── CatalogError             the catalog file is missing or invalid (carries every problem)
    ├── InvalidArgument          an argument of a request is not acceptable (a flag, a limit, a time)
    │   └── InvalidTraceparent   a traceparent that is not W3C Trace Context
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
    │   ├── AmbiguousId          a prefix matches several runs (or chain runs)
    │   └── UnknownToken         no API token has that name
    ├── NotCancellable           a cancel of a run or chain run that has already ended
    ├── Unauthenticated          no usable credentials (HTTP 401)
    ├── Forbidden                the role or job globs do not allow the action (HTTP 403)
    ├── TokenExists              an API token of that name exists already
    ├── TokenNotLive             a login link asked for a revoked or expired token
    ├── CsrfRefused              a web form posted without its session's CSRF token (HTTP 403)
    ├── MalformedRequest         an HTTP request that cannot be read (not JSON, a bad header)
    ├── MethodNotAllowed         an HTTP method a path does not take
    ├── RequestTimeout           an HTTP request past the per-request timeout
    ├── IdempotencyKeyReused     an Idempotency-Key given again with another request
    ├── IdempotencyKeyInFlight   an Idempotency-Key whose first request is still running
    ├── BusUnavailable           the message broker cannot be reached (temporary)
    ├── BusTopologyMismatch      a broker queue or exchange exists with other arguments
    ├── StoreError               the database failed
    │   ├── DatabaseUnavailable  cannot connect, or no answer in time (temporary)
    │   ├── DatabaseConflict     a statement aborted to break a conflict: run it again
    │   ├── SchemaOutOfDate      the database is not at the code's schema version
    │   ├── LeaseLost            a fenced write matched zero rows: the lease is gone
    │   └── InvalidTransition    a state change from a status that does not allow it
    └── ExecutorError            an executor call failed
        ├── TemporaryExecutorError   retry later (API 5xx, timeouts, spawn EAGAIN)
        └── PermanentExecutorError   give up with a reason (forbidden, invalid spec, ENOENT)

Each error has a short stable `code` (used as `error_code` in the run log and in JSON output),
the CLI's `exit_code` and the HTTP API's `http_status`; docs/errors.md lists every code with both
(a drift test holds the classes and the table together).
"""

from __future__ import annotations


class RunlaneError(Exception):
    """Something went wrong in runlane."""

    code = "error"
    exit_code = 1
    # The status the HTTP API answers with (docs/errors.md's HTTP column): 500 unless a
    # subclass says otherwise, so an internal outcome that reaches a client is a server error.
    http_status = 500

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or self.code).strip())

    @property
    def message(self) -> str:
        return str(self)


class ConfigError(RunlaneError):
    """The configuration is invalid."""

    code = "config_error"
    http_status = 500


class CatalogError(RunlaneError):
    """The catalog is invalid."""

    code = "catalog_invalid"
    http_status = 500

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or []


class InvalidArgument(RunlaneError):
    """An argument of a request is not acceptable (a flag's text, a limit, a time, a range)."""

    code = "invalid_argument"
    http_status = 422
    exit_code = 2


class InvalidTraceparent(InvalidArgument):
    """A traceparent (the API's `traceparent` header, the CLI's `--traceparent`) is not a W3C
    Trace Context traceparent."""

    code = "invalid_traceparent"
    http_status = 400


class RunRefused(RunlaneError):
    """The run was refused."""

    code = "refused"
    http_status = 409
    exit_code = 2


class UnknownJob(RunRefused):
    """No job with that name is in the catalog."""

    code = "unknown_job"
    http_status = 404


class UnknownChain(RunRefused):
    """No chain with that name is in the catalog."""

    code = "unknown_chain"
    http_status = 404


class ParamError(RunRefused):
    """The run's params do not match the job's allowlist."""

    code = "param_invalid"
    http_status = 422

    def __init__(self, message: str, problems: list[tuple[str | None, str]] | None = None) -> None:
        super().__init__(message)
        # Each problem with the param it is about (None: the params as a whole), so the API
        # can point at every field: `[("week", "param 'week' must be an int, got 'x'")]`.
        self.problems = problems or []


class PayloadTooLarge(RunRefused):
    """The run's params are larger than allowed."""

    code = "payload_too_large"
    http_status = 413


class OverlapRefused(RunRefused):
    """The job does not allow overlapping runs and one is already queued or running."""

    code = "overlap_refused"
    http_status = 409
    exit_code = 3

    def __init__(self, message: str, active_run_id: str) -> None:
        super().__init__(message)
        self.active_run_id = active_run_id


class EventIdTaken(RunRefused):
    """An event id given again with another key: the id names the event already recorded."""

    code = "event_id_taken"
    http_status = 409


class ConfirmationRequired(RunRefused):
    """The job acts on the outside world and needs an explicit confirmation."""

    code = "confirmation_required"
    http_status = 422


class NotFound(RunlaneError):
    """Not found."""

    code = "not_found"
    http_status = 404


class UnknownRun(NotFound):
    """No run has that id (or an id starting with that prefix)."""

    code = "unknown_run"
    http_status = 404


class UnknownChainRun(NotFound):
    """No chain run has that id (or an id starting with that prefix)."""

    code = "unknown_chain_run"
    http_status = 404


class AmbiguousId(NotFound):
    """The id prefix matches more than one run (or chain run): give more of the id."""

    code = "ambiguous_id"
    http_status = 422


class NotCancellable(RunlaneError):
    """The run (or chain run) has already ended: there is nothing to cancel."""

    code = "not_cancellable"
    http_status = 409


class UnknownToken(NotFound):
    """No API token has that name."""

    code = "unknown_token"
    http_status = 404


class Unauthenticated(RunlaneError):
    """The request carries no usable credentials: no token, or one that is unknown, expired or
    revoked. The message never says which, so a guess learns nothing."""

    code = "unauthenticated"
    http_status = 401


class Forbidden(RunlaneError):
    """The requester is known but its role (or its job globs) does not allow this action."""

    code = "forbidden"
    http_status = 403


class TokenExists(RunlaneError):
    """An API token with that name already exists (revoke it first, or choose another name)."""

    code = "token_exists"
    exit_code = 2
    http_status = 409


class TokenNotLive(RunlaneError):
    """A one-time login link was asked for a token that is revoked or has expired: nobody could
    log in with it (make a new token, `runlane token login-link NAME --role ROLE`)."""

    code = "token_not_live"
    exit_code = 2
    http_status = 409


class CsrfRefused(RunlaneError):
    """(Web UI only) a form was posted without the CSRF token of its session, with another
    one, or (the login form) from another site: nothing was done."""

    code = "csrf_refused"
    exit_code = 1
    http_status = 403


class MalformedRequest(RunlaneError):
    """The request cannot be read: a body that is not JSON, a header that is not well formed."""

    code = "malformed_request"
    exit_code = 2
    http_status = 400


class MethodNotAllowed(RunlaneError):
    """The path exists, but not with this HTTP method."""

    code = "method_not_allowed"
    exit_code = 2
    http_status = 405


class RequestTimeout(RunlaneError):
    """The request took longer than the server's per-request timeout; it may still have had
    an effect (retry with the same Idempotency-Key to be safe)."""

    code = "request_timeout"
    http_status = 503


class TooManyStreams(RunlaneError):
    """The requester has as many followed logs open as one may (each polls the database): close
    one, or wait for one to end, and try again."""

    code = "too_many_streams"
    http_status = 429


class IdempotencyKeyReused(RunlaneError):
    """The Idempotency-Key was used before with another request (another method, path or body)."""

    code = "idempotency_key_reused"
    exit_code = 2
    http_status = 422


class IdempotencyKeyInFlight(RunlaneError):
    """A request with this Idempotency-Key is still being processed: retry when it has ended."""

    code = "idempotency_key_in_flight"
    http_status = 409


class BusUnavailable(RunlaneError):
    """The message broker (RabbitMQ) cannot be reached, or did not answer in time."""

    code = "bus_unavailable"
    http_status = 503


class BusTopologyMismatch(ConfigError):
    """A queue or exchange runlane declares exists on the broker with other arguments (AMQP 406
    PRECONDITION_FAILED): the message names the differing argument."""

    code = "bus_topology_mismatch"


class StoreError(RunlaneError):
    """The database operation failed."""

    code = "store_error"
    http_status = 500


class DatabaseUnavailable(StoreError):
    """The database cannot be reached, or did not answer in time."""

    code = "database_unavailable"
    http_status = 503


class DatabaseConflict(StoreError):
    """The database aborted a statement to break a conflict with another transaction (a
    deadlock, a serialization failure, a lock wait past `lock_timeout`): nothing was written,
    and running it again is safe."""

    code = "database_conflict"
    http_status = 503


class SchemaOutOfDate(StoreError):
    """The database schema is not at the version this runlane needs."""

    code = "schema_out_of_date"
    http_status = 503


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
