"""The launcher's headline figures in one go, bracketed by the machine's speed, each against
its target: PostgreSQL throughput and launcher + database CPU per run, idle pickup latency,
launcher memory under load, SQLite throughput and CPU (the targets were set in issue 2).

The VM's speed drifts by minutes (docs/performance.md), so a figure means little without the
speed it was taken at. This runs `calibrate.py` before and after the others (the reference
rate was ~1.3k asyncio spawns/s), then the PostgreSQL throughput and CPU, the pickup latency
and the SQLite throughput, and prints one table: figure, target, met or not.

    .venv/bin/python bench/launcher_figures.py            # the full set, ~3 minutes
    .venv/bin/python bench/launcher_figures.py --quick    # tiny sizes: checks the script works
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def run(script: str, *args: str) -> str:
    """The script's last `median` line (what it prints last)."""
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=BENCH.parent,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{script} failed:\n{proc.stderr[-2000:]}")
    lines = [ln for ln in proc.stdout.splitlines() if "median" in ln]
    if not lines:
        raise SystemExit(f"{script} printed no median line:\n{proc.stdout[-2000:]}")
    print(lines[-1], flush=True)
    return lines[-1]


def number(line: str, name: str) -> float:
    found = re.search(rf"{re.escape(name)}=([\d.]+)", line)
    if found is None:
        raise SystemExit(f"no {name} in: {line}")
    return float(found.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    runs, repeat, samples, spawns = (
        ("50", "1", "10", "50") if args.quick else ("2000", "3", "200", "3000")
    )

    before = number(
        run("calibrate.py", "--spawns", spawns, "--repeat", repeat), "asyncio_16_in_flight"
    )
    pg = run("throughput.py", "--db", "postgres", "--runs", runs, "--repeat", repeat)
    pickup = run("latency.py", "--samples", samples, "--repeat", repeat)
    lite = run("throughput.py", "--db", "sqlite", "--runs", runs, "--repeat", repeat)
    after = number(
        run("calibrate.py", "--spawns", spawns, "--repeat", repeat), "asyncio_16_in_flight"
    )

    rows = [
        ("PostgreSQL runs/s", number(pg, "runs_per_s"), "> 1,300 (bar >= 800)", lambda v: v > 1300),
        (
            "PostgreSQL CPU ms/run (launcher + database)",
            number(pg, "cpu_ms_per_run"),
            "<= 0.5",
            lambda v: v <= 0.5,
        ),
        ("pickup p50 ms", number(pickup, "p50"), "<= 4", lambda v: v <= 4),
        ("pickup p99 ms", number(pickup, "p99"), "<= 10", lambda v: v <= 10),
        ("launcher RSS under load MiB", number(pg, "peak_rss_mib"), "<= 80", lambda v: v <= 80),
        (
            "SQLite runs/s",
            number(lite, "runs_per_s"),
            "(bar stated for PostgreSQL)",
            lambda v: True,
        ),
        ("SQLite CPU ms/run", number(lite, "cpu_ms_per_run"), "<= 0.5", lambda v: v <= 0.5),
    ]
    print()
    print(f"machine: {before:.0f} -> {after:.0f} asyncio spawns/s (the targets' reference: ~1,300)")
    for name, value, target, ok in rows:
        print(f"{name:<46}{value:>10.2f}  {target:<28}{'met' if ok(value) else 'NOT MET'}")


if __name__ == "__main__":
    main()
