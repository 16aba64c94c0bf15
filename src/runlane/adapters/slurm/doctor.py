"""`runlane doctor`'s Slurm checks: the client tools, `scontrol ping`, and the partitions the
catalog names (each must exist and be UP)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from typing import Literal

from runlane.adapters.slurm.commands import parse_fields, run_tool
from runlane.errors import ExecutorError

TOOLS = ("sbatch", "squeue", "scontrol", "scancel")
Level = Literal["ok", "warning", "error"]


async def slurm_report(partitions: Iterable[str]) -> list[tuple[Level, str]]:
    """(level, message) pairs: `ok`, `warning` or `error`."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return [("error", f"Slurm client tools missing on this machine: {', '.join(missing)}")]
    found: list[tuple[Level, str]] = [("ok", f"client tools: {', '.join(TOOLS)}")]
    env = dict(os.environ)
    try:
        ping = await run_tool(["scontrol", "ping"], env, 15.0)
    except ExecutorError as exc:
        return [*found, ("error", f"scontrol ping: {exc}")]
    said = " ".join((ping.stdout + ping.stderr).split())
    if ping.returncode != 0 or "is UP" not in ping.stdout:
        return [*found, ("error", f"scontrol ping: slurmctld is not UP ({said[:300]})")]
    found.append(("ok", f"scontrol ping: {said[:200]}"))
    for name in sorted(set(partitions)):
        try:
            answer = await run_tool(["scontrol", "-o", "show", "partition", name], env, 15.0)
        except ExecutorError as exc:
            found.append(("warning", f"partition {name}: not checked ({exc})"))
            continue
        fields = parse_fields(answer.stdout.strip()) if answer.returncode == 0 else {}
        if not fields.get("PartitionName"):
            found.append(("error", f"partition {name} does not exist: its jobs are refused"))
        elif fields.get("State") != "UP":
            found.append(("warning", f"partition {name} is {fields.get('State')}: jobs wait"))
        else:
            found.append(("ok", f"partition {name} is UP ({fields.get('TotalCPUs', '?')} CPUs)"))
    return found
