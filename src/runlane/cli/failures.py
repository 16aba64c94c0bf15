"""How a command fails: runlane's errors as one plain line on stderr (and, under `--json`, an
error object on stdout) with the error's exit code; never a traceback."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, ParamSpec, TypeVar

import typer

from runlane.cli import output
from runlane.cli.output import err, print_json
from runlane.errors import OverlapRefused, RunlaneError

P = ParamSpec("P")
T = TypeVar("T")


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print `error: MESSAGE` on stderr; the exit to raise, with `code`."""
    err.print(f"[red]error:[/] {output.escape(message)}")
    return typer.Exit(code)


def problem_lines(exc: RunlaneError) -> list[str]:
    """The problems the CLI prints before the error's line: an invalid catalog's
    `FILE:LINE:COL: message`s. A ParamError's problems (each with its param, for the API's
    field pointers) are already in its message, which the CLI prints alone."""
    return [p for p in getattr(exc, "problems", None) or [] if isinstance(p, str)]


def error_object(exc: RunlaneError) -> dict[str, Any]:
    """What a refusal prints on stdout under `--json` (besides its line on stderr)."""
    data: dict[str, Any] = {"error": exc.code, "message": exc.message}
    if isinstance(exc, OverlapRefused):
        data["active_run_id"] = exc.active_run_id
    problems = problem_lines(exc)
    if problems:
        data["problems"] = problems
    return data


def one_line_errors(fn: Callable[P, T]) -> Callable[P, T]:
    """Turn runlane's errors into one plain line on stderr and the error's exit code. Under
    `--json` the error is also printed on stdout as `{"error": CODE, "message": TEXT, ...}`.

    An OSError from a file operation becomes `error: PATH: <reason>` (exit 1)."""

    @wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return fn(*args, **kwargs)
        except RunlaneError as exc:
            if kwargs.get("as_json"):
                print_json(error_object(exc))
            for problem in problem_lines(exc):
                if problem != exc.message:  # a missing file is its own only problem
                    err.print(output.escape(problem))
            raise fail(exc.message, exc.exit_code) from None
        except OSError as exc:
            if exc.filename is None:
                raise
            message = f"{exc.filename}: {exc.strerror or exc}"
            if kwargs.get("as_json"):
                print_json({"error": "os_error", "message": message})
            raise fail(message, 1) from None
        except KeyboardInterrupt:
            raise typer.Exit(130) from None

    return wrapper
