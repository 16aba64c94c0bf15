"""How much of a run's environment can travel in the environment itself.

The kernel caps ONE `NAME=value` string at 128 KiB (MAX_ARG_STRLEN) and argv + envp together at
about 2 MiB (a quarter of the stack limit): a run whose params exceed that cannot even be
exec'd (E2BIG). Every executor therefore keeps the run's own environment under a budget and
moves the params that do not fit into files the job reads instead (the SDK's
`params_from_env()` follows `RUNLANE_PARAMS_FILE`): a mounted ConfigMap for pods, a private
directory for inline runs. A ConfigMap holds at most 1 MiB, so pods give the files a budget too:
`params.json` always goes, single `RUNLANE_PARAM_*` values only while they fit (the others are
read from `params.json`).
"""

from __future__ import annotations

from collections.abc import Mapping

from runlane.errors import PermanentExecutorError

# Keeping the run's own variables under 64 KiB leaves room for the launcher's or the image's.
ENV_BUDGET_BYTES = 64 * 1024
PARAMS_FILE_KEY = "params.json"
PARAMS_FILE_ENV = "RUNLANE_PARAMS_FILE"
# What a run's environment says about the run itself, which the executor sets from the run (or
# leaves out: no TRACEPARENT for a run without a trace, no RUNLANE_PARAMS once the params went
# to a file). The launcher's own values are never a run's: a launcher started inside a trace,
# or inside a run, would put every run into its trace, or give a run its params.
RUN_CONTEXT_ENV = frozenset(
    {"RUN_ID", "RUN_TRIGGER", "RUN_PARENT_ID", "RUNLANE_JOB", "RUNLANE_ATTEMPT",
     "RUNLANE_PARAMS", PARAMS_FILE_ENV, "TRACEPARENT", "TRACESTATE"}
)  # fmt: skip
RUN_PARAM_PREFIX = "RUNLANE_PARAM_"


def without_run_context(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` (the launcher's, the base of every run's) without what describes a run: the
    RUN_CONTEXT_ENV variables and every `RUNLANE_PARAM_*`."""
    return {
        k: v
        for k, v in environ.items()
        if k not in RUN_CONTEXT_ENV and not k.startswith(RUN_PARAM_PREFIX)
    }


def env_size(env: Mapping[str, str]) -> int:
    """Bytes the environment takes in the process: `NAME=value\\0` per entry."""
    return sum(len(k.encode()) + len(v.encode()) + 2 for k, v in env.items())


def file_size(files: Mapping[str, str]) -> int:
    """Bytes files take where each key and value count (a ConfigMap's `data`)."""
    return sum(len(k.encode()) + len(v.encode()) for k, v in files.items())


def split_env(
    env: Mapping[str, str],
    params_dir: str,
    budget: int = ENV_BUDGET_BYTES,
    files_budget: int | None = None,
) -> tuple[dict[str, str], dict[str, str] | None]:
    """The environment to pass as such, and the files (name → content) to put in `params_dir`
    instead, or None when everything fits.

    Over the budget, `RUNLANE_PARAMS` moves to `params_dir/params.json` (`RUNLANE_PARAMS_FILE`
    names it), then the largest `RUNLANE_PARAM_*` values follow, each to a file of its own name,
    until the rest fits. `params_dir` must be absolute: a job may change directory before it
    reads the file. Raises PermanentExecutorError (`env_too_large`) when even the
    environment without its params is over the budget.

    `files_budget` (None: unlimited) caps the bytes of the files, names included (a ConfigMap
    holds at most 1 MiB). `params.json` is always a file; a `RUNLANE_PARAM_*` that fits neither
    the environment nor what is left of the files budget is left out altogether: every param is
    in `params.json` anyway (`runlane.sdk.params_from_env()` reads it).
    """
    inline = dict(env)
    # All-ASCII (the usual case) is sized without encoding every variable: this runs for every
    # run, on the launcher's loop. Anything else is encoded, which also refuses a lone surrogate.
    keys, values = "".join(inline), "".join(inline.values())
    if keys.isascii() and values.isascii():  # (two joins: C loops, not a generator per item)
        size = len(keys) + len(values) + 2 * len(inline)
    else:
        try:
            size = env_size(inline)
        except UnicodeEncodeError as exc:
            raise PermanentExecutorError(
                "the run's command or environment holds a character no process can be given "
                f"(a NUL byte or an unpaired surrogate): {exc}",
                error_code="invalid_spec",
            ) from exc
    if size <= budget:
        return inline, None
    spilled: dict[str, str] = {}
    if "RUNLANE_PARAMS" in inline:
        spilled[PARAMS_FILE_KEY] = inline.pop("RUNLANE_PARAMS")
        inline[PARAMS_FILE_ENV] = f"{params_dir.rstrip('/')}/{PARAMS_FILE_KEY}"
    singles = sorted(
        (k for k in inline if k.startswith("RUNLANE_PARAM_")),
        key=lambda k: len(inline[k]),
        reverse=True,
    )
    used = file_size(spilled)
    for key in singles:
        if env_size(inline) <= budget:
            break
        value = inline.pop(key)
        size = len(key.encode()) + len(value.encode())
        if files_budget is None or used + size <= files_budget:
            spilled[key] = value
            used += size
        # else: left out; params.json holds it
    if env_size(inline) > budget:
        raise PermanentExecutorError(
            f"the run's environment without its params is {env_size(inline)} bytes, over the "
            f"{budget}-byte budget; shrink the profile's or the job's env",
            error_code="env_too_large",
        )
    return inline, spilled
