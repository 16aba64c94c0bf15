"""Recovery time after kill -9 of the launcher supervising a run (PostgreSQL).

Two `runlane serve` processes share one database. A long inline run starts on one of them; that
launcher is killed with SIGKILL; the time until the run's row is final (`launcher_lost`, recorded
by the survivor) is one sample. Target: ≤ lease TTL + one claim interval. Prints p50/p99.

    .venv/bin/python bench/recovery.py --samples 20 --ttl 5s
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
from _common import median, percentile, runlane_cmd, scratch_database

from runlane.core.durations import parse_duration

CATALOG = f"""
version: 1
global: {{max_deadline: 1h, kill_grace: 1s}}
defaults: {{executor: inline, overlap: allow, max_attempts: 1, deadline: 10m}}
jobs:
  long:
    command: [{sys.executable}, -c, "import time; time.sleep(600)"]
"""


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--ttl", default="5s")
    ap.add_argument("--claim-interval", default="1s")
    args = ap.parse_args()
    ttl = parse_duration(args.ttl)
    claim = parse_duration(args.claim_interval)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "catalog.yaml").write_text(CATALOG)
        with scratch_database("postgres", work) as url:
            env = dict(
                os.environ,
                RUNLANE_DATABASE_URL=url,
                RUNLANE_CATALOG=str(work / "catalog.yaml"),
                RUNLANE_LOG_DIR=str(work / "logs"),
                RUNLANE_LEASE_TTL=args.ttl,
                RUNLANE_CLAIM_INTERVAL=args.claim_interval,
                RUNLANE_LOG_LEVEL="error",
            )
            subprocess.run(
                [*runlane_cmd(), "db", "upgrade"], env=env, check=True, capture_output=True
            )
            launchers = [subprocess.Popen([*runlane_cmd(), "serve"], env=env) for _ in range(2)]
            samples: list[float] = []
            try:
                with psycopg.connect(url, autocommit=True) as conn:
                    for _ in range(args.samples):
                        out = subprocess.run(
                            [*runlane_cmd(), "run", "long", "--json"],
                            env=env,
                            check=True,
                            capture_output=True,
                            text=True,
                        ).stdout
                        run_id = out.split('"id": "', 1)[1].split('"', 1)[0]
                        owner = None
                        while owner is None:
                            row = conn.execute(
                                "SELECT lease_owner FROM run_log WHERE id = %s AND status = 'running'",
                                (run_id,),
                            ).fetchone()
                            owner = row[0] if row else None
                            time.sleep(0.01)
                        pid = int(owner.split(":")[1])
                        victim = next(p for p in launchers if p.pid == pid)
                        killed = time.monotonic()
                        victim.send_signal(signal.SIGKILL)
                        victim.wait()
                        while True:
                            row = conn.execute(
                                "SELECT status FROM run_log WHERE id = %s", (run_id,)
                            ).fetchone()
                            if row and row[0] != "running":
                                break
                            time.sleep(0.01)
                        samples.append(time.monotonic() - killed)
                        launchers[launchers.index(victim)] = subprocess.Popen(
                            [*runlane_cmd(), "serve"], env=env
                        )
                        print(f"sample {len(samples)}: {samples[-1]:.2f}s", flush=True)
            finally:
                for p in launchers:
                    p.kill()
                    p.wait()
    print(
        f"recovery after kill -9: p50={median(samples):.2f}s p99={percentile(samples, 99):.2f}s "
        f"max={max(samples):.2f}s (ttl {ttl:g}s + claim interval {claim:g}s = {ttl + claim:g}s)"
    )


if __name__ == "__main__":
    main()
