"""Run `python -m runlane ARGS` under cProfile with a CPU clock of the calling thread
(`time.thread_time`), so the profile of the event-loop thread counts its CPU, not the time it
waited: `_thread_cprofile.py OUT ARGS...` (bench/throughput.py --cprofile)."""

from __future__ import annotations

import cProfile
import runpy
import sys
import time

out, sys.argv = sys.argv[1], ["runlane", *sys.argv[2:]]
profile = cProfile.Profile(time.thread_time)
profile.enable()
try:
    runpy.run_module("runlane", run_name="__main__", alter_sys=True)
finally:
    profile.disable()
    profile.dump_stats(out)
