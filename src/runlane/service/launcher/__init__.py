"""The launcher: claims queued runs, supervises their executions under a lease, records outcomes.

launcher.py is the claim loop and owns the rest: supervisor.py (one task per run), finisher.py
(batched outcome saves, retried writes), journal.py (outcomes on disk through an outage),
leases.py, heartbeat.py, spec.py (what an execution is given), signals.py (the test hook).
"""

from __future__ import annotations

from runlane.service.launcher.launcher import Launcher
from runlane.service.launcher.signals import LauncherHook, LauncherSignal
from runlane.service.launcher.spec import build_env, job_env

__all__ = ["Launcher", "LauncherHook", "LauncherSignal", "build_env", "job_env"]
