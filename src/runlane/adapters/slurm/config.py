"""Whether this launcher can use a Slurm cluster, and the Slurm executor's settings.

Slurm is available when `sbatch` is on the PATH and the client is configured: `SLURM_CONF`
names a file, or `/etc/slurm/slurm.conf` exists (configless clusters: set
`RUNLANE_SLURM=on`). `RUNLANE_SLURM=off` turns it off. `RUNLANE_SLURM_POLL_INTERVAL` is the
shared poll's interval (seconds, default 5). Jobs write their output to `RUNLANE_LOG_DIR`
(`<run_id>.<attempt>.log`, as inline runs do), which must be on a file system the compute nodes
share with the launcher (docs/slurm.md).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from runlane.core.durations import env_duration
from runlane.errors import ConfigError

DEFAULT_CONF = "/etc/slurm/slurm.conf"
DEFAULT_POLL_INTERVAL = 5.0
_ON = ("on", "1", "true", "yes")
_OFF = ("off", "0", "false", "no")


def slurm_configured(environ: Mapping[str, str] | None = None) -> bool:
    """Whether Slurm is used here; ConfigError for a `RUNLANE_SLURM` that is neither on nor off
    (a typo taken for "unset" would run Slurm jobs inline without a word)."""
    env = os.environ if environ is None else environ
    raw = env.get("RUNLANE_SLURM") or ""
    switch = raw.strip().lower()
    if switch and switch not in _ON + _OFF:
        raise ConfigError(
            f"RUNLANE_SLURM={raw[:60]!r}: expected on or off (unset: Slurm where sbatch and its "
            "configuration are found)"
        )
    if switch in _OFF:
        return False
    if shutil.which("sbatch", path=env.get("PATH")) is None:
        return False
    if switch in _ON:
        return True
    conf = env.get("SLURM_CONF")
    return Path(conf).is_file() if conf else Path(DEFAULT_CONF).is_file()


def poll_interval(environ: Mapping[str, str] | None = None) -> float:
    """`RUNLANE_SLURM_POLL_INTERVAL`: a duration (`5s`; a bare number is seconds) from 50 ms to
    10 minutes."""
    return env_duration(
        os.environ if environ is None else environ,
        "RUNLANE_SLURM_POLL_INTERVAL",
        DEFAULT_POLL_INTERVAL,
        minimum=0.05,
        maximum=600.0,
    )
