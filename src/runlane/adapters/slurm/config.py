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

from runlane.errors import ConfigError

DEFAULT_CONF = "/etc/slurm/slurm.conf"
DEFAULT_POLL_INTERVAL = 5.0


def slurm_configured(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    switch = (env.get("RUNLANE_SLURM") or "").strip().lower()
    if switch in ("off", "0", "false", "no"):
        return False
    if shutil.which("sbatch", path=env.get("PATH")) is None:
        return False
    if switch in ("on", "1", "true", "yes"):
        return True
    conf = env.get("SLURM_CONF")
    return Path(conf).is_file() if conf else Path(DEFAULT_CONF).is_file()


def poll_interval(environ: Mapping[str, str] | None = None) -> float:
    env = os.environ if environ is None else environ
    text = env.get("RUNLANE_SLURM_POLL_INTERVAL")
    if not text:
        return DEFAULT_POLL_INTERVAL
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.05 <= value <= 600:
        raise ConfigError(
            f"RUNLANE_SLURM_POLL_INTERVAL: {text!r} is not a number of seconds from 0.05 to 600"
        )
    return value
