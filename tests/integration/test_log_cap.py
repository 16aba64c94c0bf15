"""The catalog's `log_max_bytes` reaches the inline executor: a job's own cap cuts its log file
(keeping the tail), and a job without one gets `defaults.log_max_bytes`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from runlane.catalog import parse_catalog_text
from runlane.core.runs import RunStatus, Trigger
from runlane.ports import Store
from runlane.service.accept import RunRequest
from runlane.service.config import Settings

from .conftest import run_to_end

PY = sys.executable
# 3,000 numbered lines of 10 bytes: 30,000 bytes of output.
WRITER = "import sys; sys.stdout.write(''.join(f'{i:09d}\\n' for i in range(3000)))"
CATALOG = f"""
version: 1
defaults: {{executor: inline, overlap: allow, deadline: 1m, log_max_bytes: 8KiB}}
jobs:
  small-cap:
    command: [{PY}, -c, {json.dumps(WRITER)}]
    log_max_bytes: 2KiB
  default-cap:
    command: [{PY}, -c, {json.dumps(WRITER)}]
"""
OUTPUT = b"".join(b"%09d\n" % i for i in range(3000))


async def test_each_job_gets_its_log_cap(store: Store, settings: Settings) -> None:
    catalog = parse_catalog_text(CATALOG)
    requests = [RunRequest(job=j, trigger=Trigger.CLI) for j in ("small-cap", "default-cap")]
    ids = await run_to_end(store, catalog, settings, requests)
    for run_id, cap in zip(ids, (2048, 8192), strict=True):
        run = await store.get_run(run_id)
        assert run.status is RunStatus.SUCCESS, (run.error_code, run.note)
        data = (Path(settings.log_dir) / f"{run_id}.1.log").read_bytes()
        assert data.startswith(
            OUTPUT[:cap] + f"\n[runlane: output truncated after {cap} bytes".encode()
        )
        # The whole dropped part fits the 64 KiB tail, so it is all appended after the marker.
        assert data.endswith(b"[runlane: 0 bytes dropped]\n" + OUTPUT[cap:])
