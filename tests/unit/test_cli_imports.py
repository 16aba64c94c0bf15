"""Every `runlane` command pays for what the CLI imports at start-up. The catalog's models and
YAML loader (~0.2 s), the launcher, the chain, event and schedule services are imported only by
the commands that use them, so `runlane runs`, `logs`, `cancel`, `config`… start without them."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = (
    "runlane.catalog.models",
    "runlane.catalog.loader",
    "yaml",
    "runlane.service.launcher",
    "runlane.service.chains",
    "runlane.service.events",
    "runlane.service.scheduler",
    "runlane.cli.docs_gen",
    # The operations layer (~70 ms): each command imports it when it runs.
    "runlane.service.operations",
)


def loaded_after(code: str) -> set[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_the_cli_and_a_database_command_start_without_the_catalog_or_the_launcher() -> None:
    loaded = loaded_after(
        "import runlane.cli.app\n"
        "from runlane.service.runtime import open_runtime\n"
        "from runlane.service.accept import RunRequest\n"
    )
    assert "runlane.cli.app" in loaded
    assert sorted(set(HEAVY) & loaded) == []


def test_catalog_names_load_on_first_use() -> None:
    loaded = loaded_after(
        "import runlane.catalog as c\n"
        "assert 'runlane.catalog.models' not in __import__('sys').modules\n"
        "from runlane.catalog import Catalog, load_catalog\n"
        "assert Catalog.__name__ == 'Catalog' and callable(load_catalog)\n"
        "assert c.MAX_PARAMS_BYTES == 1024 * 1024\n"
    )
    assert {"runlane.catalog.models", "runlane.catalog.loader"} <= loaded
