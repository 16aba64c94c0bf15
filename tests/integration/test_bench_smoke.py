"""Every benchmark script still runs and prints its figures (tiny sizes: this times nothing).

The figures in docs/performance.md come from these scripts; a script that rots would leave
them unreproducible. bench/soak.py is left out: tests/chaos drives the same harness.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"

# script, tiny arguments, a pattern its last lines must contain (a figure with its unit)
CASES = [
    ("api_runs.py", "--rows 2000 --requests 20", r"none first +p50=\d+\.\d+ ms p99=\d+\.\d+ ms"),
    ("calibrate.py", "--spawns 50 --repeat 1", r"asyncio_16_in_flight=\d+/s threads_16=\d+/s"),
    (
        "claim_finish_pg.py",
        "--runs 50 --repeat 2 --facts-triggers on,off",
        r"triggers on median of 2\] pg_cpu_ms_per_run=\d+\.\d+(.|\n)*off median of 2\]",
    ),
    ("fencing.py", "--runs 50 --repeat 1", r"cost of fencing=[+-]?\d+\.\d+ ms"),
    (
        "claim_stale_stats.py",
        "--quick",
        r"before the backlog \d+\.\d+ ms \(candidates via \w+ \(\d+ rows\), update via "
        r"\w+ \(\d+ rows\)\); after ANALYZE \d+\.\d+ ms",
    ),
    (
        "metrics_scrape.py",
        "--rows 2000 --scrapes 3 --repeat 1",
        r"in process: median of 1 rounds \d+\.\d+ ms(.|\n)*http: median of 1 rounds \d+\.\d+ ms",
    ),
    (
        "http_overhead.py",
        "--quick",
        r"http on median of 1\] runs_per_s=\d+(.|\n)*RSS median of 1=\d+\.\d+ MiB",
    ),
    (
        "first_runs.py",
        "--quick",
        r"\[prepare=on median of 1\] backlog of 8: first started \d+\.\d+ ms(.|\n)*"
        r"\[prepare=off median of 1\] .*busy: claimed -> started \d+\.\d+ ms",
    ),
    ("gil_spawn.py", "--spawns 40 --repeat 1 --threads 1,2", r"ctypes +2 +\d+ +\d+\.\d+"),
    ("inline_executor.py", "--runs 50 --repeat 1", r"cpu_ms_per_run=\d+\.\d+"),
    (
        "launcher_figures.py",
        "--quick",
        r"machine: \d+ -> \d+ asyncio spawns/s(.|\n)*SQLite CPU ms/run",
    ),
    (
        "latency.py",
        "--quick --floor",
        r"\[postgres median of 1\] pickup p50=\d+\.\d+ ms p99=\d+\.\d+ ms(.|\n)*"
        r"\[floor median of 1\] pickup p50=\d+\.\d+ ms(.|\n)*runlane_vs_floor p50=\d+\.\d+x",
    ),
    (
        "multi_launcher.py",
        "--runs 100 --launchers 1 2 --repeat 1 --hold --spawners 1",
        r"launcher\(s\); CPU per run: .* machine idle \d+\.\d+%(.|\n)*\] \d+ runs/s",
    ),
    ("pod_scale.py", "--runs 20 --repeats 1 --per-kind 2", r"\d+\.\d+ s after the deadline"),
    ("pod_scale.py", "--launcher --runs 20 --repeats 1", r"recorded \d+\.\d+ s after it started"),
    ("recovery.py", "--samples 1 --ttl 2s --claim-interval 0.5s", r"p50=\d+\.\d+s"),
    ("schedule_latency.py", "--jobs 10 --short --db sqlite", r"p99 start lag \d+ ms"),
    ("schedule_tick.py", "--jobs 100 --short", r"\d+\.\d+ ms CPU"),
    ("spawn.py", "--spawns 50 --repeats 1", r"RSS \d+\.\d+ MiB"),
    (
        "spawner_proto.py",
        "--spawns 50 --repeat 1",
        r"spawner, pipe +\d+ +\d+\.\d+ +\d+\.\d+(.|\n)*executor, loop +\d+",
    ),
    ("store_micro.py", "--runs 50 --workers 2", r"[\d,]+ runs/s"),
    (
        "web_runs_cpu.py",
        "--rows 2000 --requests 10 --warm 2 --repeat 1",
        r"none +page \d+\.\d+ +api \d+\.\d+ +difference [+-]\d+\.\d+",
    ),
    ("throughput.py", "--quick --db sqlite", r"runs_per_s=\d+\.\d+"),
    (
        "throughput.py",
        "--quick --db postgres",
        r"cpu_ms_per_run=\d+\.\d+ .*helpers_cpu_ms_per_run=\d+\.\d+ .*"
        r"machine_idle_pct=(\d+\.\d+|nan)",
    ),
    (
        "throughput.py",
        "--quick --db postgres --statements --in-flight 1,4 --history 2000",
        r"statements per run: \d+\.\d+(.|\n)*\[postgres c=4 median of 1\] runs_per_s=\d+",
    ),
]


@pytest.mark.parametrize(
    ("script", "args", "pattern"), CASES, ids=[f"{c[0]} {c[1]}" for c in CASES]
)
def test_bench_script_runs(script: str, args: str, pattern: str, pg_database: str) -> None:
    # pg_database: most scripts need the PostgreSQL server (a failure in CI, never a skip)
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), *args.split()],
        cwd=BENCH.parent,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(pattern, proc.stdout), proc.stdout[-3000:]


PEERS = ("runlane", "dramatiq", "celery", "procrastinate", "pgqueuer")


def _line(pattern: str, stdout: str) -> re.Match[str]:
    """The line of `stdout` that `pattern` matches (anchored per line); fails with the output's
    tail when none does."""
    found = re.search(pattern, stdout, re.MULTILINE)
    assert found, f"no line matches {pattern!r}:\n{stdout[-3000:]}"
    return found


def test_peers_bench_runs_every_peer(pg_database: str) -> None:
    # bench/peers.py --quick: 50 jobs once through runlane and each other queue (RabbitMQ too).
    try:
        socket.create_connection(("127.0.0.1", 5672), timeout=5).close()
    except OSError as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"RabbitMQ is required in CI: {e}")
        pytest.skip(f"RabbitMQ not reachable: {e}")
    # In a session of its own: on a timeout its whole process group goes (the launcher that
    # bench/throughput.py starts, the peers' workers), not only the script.
    with subprocess.Popen(
        [sys.executable, str(BENCH / "peers.py"), "--quick"],
        cwd=BENCH.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as running:
        try:
            stdout, stderr = running.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            os.killpg(running.pid, signal.SIGKILL)
            stdout, stderr = running.communicate()
            pytest.fail(f"bench/peers.py --quick ran past 240 s:\n{stdout[-3000:]}{stderr[-3000:]}")
    proc = subprocess.CompletedProcess(running.args, running.returncode, stdout, stderr)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for peer in PEERS:
        found = _line(
            # each peer at its default setting (`peer@setting/broker`), runlane as itself
            rf"^\[{peer}(?:@\w+)?/\w+ #1\] jobs=(\d+)/50 +jobs_per_s=(\d+\.\d+) .*"
            rf"cpu_ms_per_job=(\d+\.\d+) +worker_cpu_ms_per_job=(\d+\.\d+) +"
            rf"broker_cpu_ms_per_job=(\d+\.\d+) .*peak_rss_mib=(\d+\.\d+) +"
            # (NaN when the jobs took under two of its 10 ms samples)
            rf"machine_idle_pct=(\d+\.\d+|nan)$",
            proc.stdout,
        )
        done, per_s, cpu, worker, broker, rss, idle = found.groups()
        assert done == "50", found.group(0)  # every job ran, once
        assert idle == "nan" or 0 <= float(idle) <= 100, found.group(0)
        assert float(per_s) > 0, found.group(0)
        assert float(cpu) == pytest.approx(float(worker) + float(broker), abs=0.011)
        assert float(rss) > 0, found.group(0)
        # The jobs' own CPU (each `true`, reaped by the worker): some, for 50 spawns.
        jobs_cpu = _line(
            rf"^\[{peer}(?:@\w+)?/\w+ #1\] .*jobs_cpu_ms_per_job=(\d+\.\d+)", proc.stdout
        )
        assert float(jobs_cpu.group(1)) > 0, jobs_cpu.group(0)
        _line(rf"^\[{peer}(?:@\w+)?/\w+ median of 1\] jobs=50/50 ", proc.stdout)
    floor = _line(r"^\[floor/16 threads #1\] jobs=50/50 +spawns_per_s=(\d+\.\d+)", proc.stdout)
    assert float(floor.group(1)) > 0, floor.group(0)
    ratios = _line(r"^\[ratios, median over rounds\] runlane_vs_floor=(\d+\.\d+)", proc.stdout)
    assert float(ratios.group(1)) > 0, ratios.group(0)
    # Each ratio with its rounds' range, which holds the median (one round here: all three equal).
    ranged = _line(
        r"^\[ratios, median over rounds\] "
        r"runlane_vs_floor=(\d+\.\d+) \(rounds=1: (\d+\.\d+)-(\d+\.\d+)\)",
        proc.stdout,
    )
    mid, low, high = map(float, ranged.groups())
    assert low <= mid <= high, ranged.group(0)
    # The floor's CPU a spawn, apart (the spawning process's and the `true`s'), and what a job
    # cost each queue beyond it.
    floor_cpu = _line(
        r"^\[floor/16 threads #1\] .*cpu_ms_per_spawn=(\d+\.\d+) +"
        r"spawner_cpu_ms_per_spawn=(\d+\.\d+) +jobs_cpu_ms_per_job=(\d+\.\d+)$",
        proc.stdout,
    )
    total, own, kids = map(float, floor_cpu.groups())
    assert total == pytest.approx(own + kids, abs=0.011)
    assert kids > 0, floor_cpu.group(0)
    # Where the machine went: each queue's whole CPU a job, the share of the machine it
    # accounts for at its rate, and the idle share.
    for name in ("runlane", "best_peer"):
        use = _line(
            r"^\[the machine's CPU while each ran, median over rounds\] .*"
            rf"\b{name}=(\d+\.\d+) ms a job, (\d+\.\d+)% counted, (\d+\.\d+|nan)% idle ",
            proc.stdout,
        )
        whole, counted, idle = use.groups()
        assert float(whole) > 0, use.group(0)
        assert float(counted) > 0, use.group(0)
        assert idle == "nan" or 0 <= float(idle) <= 100, use.group(0)
    _line(
        r"^\[CPU ms a job beyond the floor's \d+\.\d+ ms a spawn, median over rounds\] "
        r"runlane=-?\d+\.\d+ \(runlane/postgres\).* best_peer=-?\d+\.\d+ ",
        proc.stdout,
    )


def test_peers_machine_use_is_the_counted_share_of_the_cores() -> None:
    """peers.py's last line, from figures given to it: a job's whole CPU (the queue's and its
    `true`'s), times jobs/s over the machine's cores, is the share counted; medians over rounds.
    Run in a child process: importing the bench sets its environment defaults."""
    code = (
        "import sys; sys.path.insert(0, 'bench'); import peers\n"
        "r = {'q/db': {1: dict(jobs_per_s=1000.0, cpu_ms_per_job=0.2, jobs_cpu_ms_per_job=0.5,"
        " machine_idle_pct=8.0), 2: dict(jobs_per_s=3000.0, cpu_ms_per_job=0.2,"
        " jobs_cpu_ms_per_job=0.5, machine_idle_pct=float('nan')),"
        " 3: dict(jobs_per_s=2000.0, cpu_ms_per_job=0.3, jobs_cpu_ms_per_job=0.5,"
        " machine_idle_pct=4.0)}}\n"
        "print(peers.CPUS); print(peers.machine_use(r, [('mine', 'q/db'), ('gone', None)]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=BENCH.parent, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    cpus_line, line = proc.stdout.strip().splitlines()
    cpus = int(cpus_line)
    # Rounds' counted shares: 1000 x 0.7, 3000 x 0.7, 2000 x 0.8 ms a second over the cores; the
    # median is 1,600 ms a second. Idle: the rounds that have it (8 and 4), median 6.
    counted = 1600.0 / (cpus * 1000.0) * 100.0
    assert line == (
        "[the machine's CPU while each ran, median over rounds] "
        f"mine=0.700 ms a job, {counted:.1f}% counted, 6.0% idle (q/db)"
    ), line
