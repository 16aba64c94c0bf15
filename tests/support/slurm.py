"""The test suites' Slurm: a one-node cluster (slurmctld + slurmd, no slurmdbd, no systemd) in a
temporary directory, as `research/anchors-k8s-slurm.md` §4.4 verified on this machine kind.

munged is the machine's one (started here if it is not running); slurmctld and slurmd get free
ports of their own, so two test sessions (xdist workers) can each run a cluster. No accounting
(`sacct` says so), the job-completion log is `jobcomp/filetxt`. Missing Slurm packages skip the
tests locally and fail them in CI (`./dev tools` installs them).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

TOOLS = ("sbatch", "squeue", "scontrol", "scancel", "sinfo", "slurmctld", "slurmd", "munged")
MUNGE_SOCKET = Path("/run/munge/munge.socket.2")
UP_WITHIN = 30.0  # seconds for slurmctld to answer and the node to be idle, on a loaded machine


def slurm_missing(reason: str) -> None:
    """Skip locally; in CI a missing Slurm is a failure, not a skip."""
    message = f"Slurm is not usable here: {reason} (`./dev tools` installs it)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def _tool(name: str) -> str | None:
    return shutil.which(name) or next(
        (p for d in ("/usr/sbin", "/sbin") if os.access(p := f"{d}/{name}", os.X_OK)), None
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def node_resources() -> tuple[int, int]:
    """This machine's CPUs and memory (MiB) as slurmd sees them (`slurmd -C`): the node the
    cluster declares must not claim more, or slurmd drains it."""
    out = subprocess.run(
        [_tool("slurmd") or "slurmd", "-C"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    fields = dict(part.split("=", 1) for part in out.split() if "=" in part)
    return int(fields.get("CPUs", "1")), int(fields.get("RealMemory", "1000"))


def ensure_munged() -> None:
    """The machine's munged (root, §4.4), started when its socket does not answer."""
    if MUNGE_SOCKET.exists():
        probe = subprocess.run(["munge", "-n"], capture_output=True, timeout=10, check=False)
        if probe.returncode == 0:
            return
    MUNGE_SOCKET.parent.mkdir(parents=True, exist_ok=True)
    shutil.chown(MUNGE_SOCKET.parent, "munge", "munge")
    # Not checked: another test session (an xdist worker) may be starting it right now, and
    # then this one exits at once; the probe below says whether one is serving.
    subprocess.run(
        ["su", "-s", "/bin/sh", "munge", "-c", _tool("munged") or "munged"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    deadline = time.monotonic() + 10
    while subprocess.run(["munge", "-n"], capture_output=True, check=False).returncode != 0:
        if time.monotonic() > deadline:
            raise RuntimeError("munged did not start")
        time.sleep(0.1)


CONF = """\
ClusterName=rltest
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
AuthType=auth/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={dir}/jobcomp.log
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MinJobAge=3600
KillWait=2
MessageTimeout=3
InactiveLimit=0
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


@dataclass
class SlurmCluster:
    """A running test cluster: clients reach it with `env` (SLURM_CONF)."""

    root: Path
    conf: Path
    cpus: int
    memory: int

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def _pid(self, daemon: str) -> int | None:
        try:
            return int((self.root / f"{daemon}.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def start_ctld(self) -> None:
        subprocess.run(
            [_tool("slurmctld") or "slurmctld", "-f", str(self.conf)],
            check=True,
            timeout=30,
            capture_output=True,
        )

    def start_slurmd(self) -> None:
        subprocess.run(
            [_tool("slurmd") or "slurmd", "-f", str(self.conf), "-N", "localhost"],
            check=True,
            timeout=30,
            capture_output=True,
        )

    def stop_daemon(self, daemon: str, *, within: float = 20.0) -> None:
        """Stop slurmctld or slurmd (SIGTERM via its pid file) and wait until it has gone."""
        pid = self._pid(daemon)
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + within
        while _alive(pid):
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                break
            time.sleep(0.05)

    def tool(self, *argv: str, check: bool = False) -> str:
        """A Slurm client call on this cluster (as an operator would make it); its stdout."""
        return subprocess.run(
            list(argv),
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=30,
            check=check,
        ).stdout

    def scontrol(self, *args: str) -> str:
        return self.tool("scontrol", *args)

    def wait_up(self, within: float = UP_WITHIN) -> None:
        """Until slurmctld answers and the node takes jobs (idle or mixed/allocated)."""
        deadline = time.monotonic() + within
        while True:
            ping = self.scontrol("ping")
            node = self.scontrol("-o", "show", "node", "localhost")
            state = next((p.split("=", 1)[1] for p in node.split() if p.startswith("State=")), "")
            if "is UP" in ping and state.split("+")[0] in ("IDLE", "MIXED", "ALLOCATED"):
                return
            if time.monotonic() > deadline:
                log = (self.root / "slurmctld.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"Slurm did not come up: {ping!r} {state!r}\n{log}")
            time.sleep(0.1)

    def stop(self) -> None:
        self.tool("scancel", "--full", "--user", "root")
        self.stop_daemon("slurmd")
        self.stop_daemon("slurmctld")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie of ours (the daemons fork away from us, so normally not): treat as gone.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


@contextlib.contextmanager
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A one-node cluster of its own in a temporary directory, stopped at the end."""
    missing = [t for t in TOOLS if _tool(t) is None]
    if missing:
        slurm_missing("missing " + ", ".join(missing))
    if os.geteuid() != 0:
        slurm_missing("the test cluster runs its daemons as root")
    root = Path(tempfile.mkdtemp(prefix="runlane-slurm-"))
    (root / "state").mkdir()
    (root / "spool").mkdir()
    cpus, memory = node_resources()
    conf = root / "slurm.conf"
    conf.write_text(
        CONF.format(
            dir=root,
            ctld_port=_free_port(),
            slurmd_port=_free_port(),
            cpus=cpus,
            memory=min(memory, 2000),
        )
    )
    cluster = SlurmCluster(root=root, conf=conf, cpus=cpus, memory=min(memory, 2000))
    try:
        ensure_munged()
        cluster.start_ctld()
        cluster.start_slurmd()
        cluster.wait_up()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
