"""`python -m runlane.testing.kube` serves the fake and writes a kubeconfig clients can use."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from tests.kube_fake.http import Raw


def test_module_entry_point_serves_and_writes_kubeconfig(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runlane.testing.kube",
            "--port",
            "0",
            "--kubeconfig",
            str(kubeconfig),
            "--legacy-conditions",
            "--allow",
            "get,list jobs.batch",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("kube fake serving http://127.0.0.1:")
        config = yaml.safe_load(kubeconfig.read_text())
        url = config["clusters"][0]["cluster"]["server"]
        assert line.split()[3].rstrip(";") == url
        assert config["users"][0]["user"]["token"]
        raw = Raw(url)
        assert raw.request("GET", "/apis/batch/v1/namespaces/default/jobs")[0] == 200
        assert raw.request("DELETE", "/apis/batch/v1/namespaces/default/jobs/x")[0] == 403
        # the admin endpoints inject faults over HTTP too
        assert raw.request("POST", "/fake/fail?count=1&status=503")[0] == 200
        assert raw.request("GET", "/apis/batch/v1/namespaces/default/jobs")[0] == 503
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
    assert proc.returncode == 0
