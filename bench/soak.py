"""The chaos harness at soak size: more runs, longer, same checks (nothing lost, nothing run twice,
no stale write). Prints the summary and every violation; exits 1 on any.

    .venv/bin/python bench/soak.py --runs 5000 --seconds 600 --restart-postgres
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from runlane.testing.chaos import ChaosConfig, run_chaos


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=5000)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--launchers", type=int, default=3)
    ap.add_argument("--restart-postgres", action="store_true")
    ap.add_argument(
        "--postgres-url",
        default=os.environ.get(
            "RUNLANE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
        ),
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = run_chaos(
            ChaosConfig(
                admin_url=args.postgres_url,
                workdir=Path(tmp),
                runs=args.runs,
                duration=args.seconds,
                launchers=args.launchers,
                restart_postgres=args.restart_postgres,
                drain_timeout=max(120.0, args.seconds / 2),
            )
        )
    print(report.summary())
    for violation in report.violations:
        print("VIOLATION", violation)
    sys.exit(1 if report.violations else 0)


if __name__ == "__main__":
    main()
