"""`python -m runlane.testing.kube --port PORT --kubeconfig PATH`: serve the fake until interrupted."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from runlane.testing.kube.fake import KubeFake
from runlane.testing.kube.kubelet import Timing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runlane.testing.kube", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--kubeconfig", default="kubeconfig", help="where to write the kubeconfig")
    parser.add_argument(
        "--legacy-conditions",
        action="store_true",
        help="Job conditions of Kubernetes < 1.31 (only Complete/Failed)",
    )
    parser.add_argument(
        "--run-local",
        action="store_true",
        help="run every non-fake/ image's command as a local process",
    )
    parser.add_argument(
        "--allow",
        action="append",
        default=None,
        metavar="RULE",
        help="access rule 'VERB RESOURCE' (repeatable); default: allow everything",
    )
    parser.add_argument(
        "--namespace", action="append", default=[], help="extra namespace to create"
    )
    parser.add_argument("--pull-seconds", type=float, default=0.0, help="ContainerCreating time")
    parser.add_argument(
        "--run-seconds", type=float, default=0.0, help="running time of scripted containers"
    )
    args = parser.parse_args(argv)
    fake = KubeFake(
        host=args.host,
        port=args.port,
        kubeconfig_path=args.kubeconfig,
        conditions="legacy" if args.legacy_conditions else "modern",
        timing=Timing(pull=args.pull_seconds, run=args.run_seconds),
        run_local=args.run_local,
        allow=args.allow,
        namespaces=args.namespace,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    fake.start()
    sys.stdout.write(f"kube fake serving {fake.url}; kubeconfig {fake.kubeconfig_path}\n")
    sys.stdout.flush()
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        fake.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
