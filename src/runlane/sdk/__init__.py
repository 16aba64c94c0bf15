"""What runs inside a job: `run_scope()` to adopt the run and record nested work, and the
helpers that read what the launcher passed (`trigger_from_env()`, `params_from_env()`)."""

from __future__ import annotations

from runlane.sdk.scope import (
    RunScope,
    RunScopeContext,
    current_scope,
    params_from_env,
    run_scope,
    trigger_from_env,
)

__all__ = [
    "RunScope",
    "RunScopeContext",
    "current_scope",
    "params_from_env",
    "run_scope",
    "trigger_from_env",
]
