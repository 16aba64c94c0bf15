"""How much of a run's environment can travel in the environment itself.

The kernel caps ONE `NAME=value` string at 128 KiB (MAX_ARG_STRLEN) and argv + envp together at
about 2 MiB (a quarter of the stack limit): a run whose params exceed that cannot even be
exec'd (E2BIG). Every executor therefore keeps the run's own environment under a budget and
moves the params that do not fit into files the job reads instead (the SDK's
`params_from_env()` follows `RUNLANE_PARAMS_FILE`): a mounted ConfigMap for pods, a private
directory for inline runs.
"""

from __future__ import annotations

from collections.abc import Mapping

from runlane.errors import PermanentExecutorError

# Keeping the run's own variables under 64 KiB leaves room for the launcher's or the image's.
ENV_BUDGET_BYTES = 64 * 1024
PARAMS_FILE_KEY = "params.json"
PARAMS_FILE_ENV = "RUNLANE_PARAMS_FILE"


def env_size(env: Mapping[str, str]) -> int:
    """Bytes the environment takes in the process: `NAME=value\\0` per entry."""
    return sum(len(k.encode()) + len(v.encode()) + 2 for k, v in env.items())


def split_env(
    env: Mapping[str, str], params_dir: str, budget: int = ENV_BUDGET_BYTES
) -> tuple[dict[str, str], dict[str, str] | None]:
    """The environment to pass as such, and the files (name → content) to put in `params_dir`
    instead, or None when everything fits.

    Over the budget, `RUNLANE_PARAMS` moves to `params_dir/params.json` (`RUNLANE_PARAMS_FILE`
    names it), then the largest `RUNLANE_PARAM_*` values follow, each to a file of its own name,
    until the rest fits. Raises PermanentExecutorError (`env_too_large`) when even the
    environment without its params is over the budget.
    """
    inline = dict(env)
    if env_size(inline) <= budget:
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
    for key in singles:
        if env_size(inline) <= budget:
            break
        spilled[key] = inline.pop(key)
    if env_size(inline) > budget:
        raise PermanentExecutorError(
            f"the run's environment without its params is {env_size(inline)} bytes, over the "
            f"{budget}-byte budget; shrink the profile's or the job's env",
            error_code="env_too_large",
        )
    return inline, spilled
