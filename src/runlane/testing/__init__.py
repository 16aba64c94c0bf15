"""Test doubles shipped with runlane, for runlane's own test suites and benchmarks and for anyone
testing code that drives runlane (a new executor or store adapter, a deployment's smoke tests).

- `runlane.testing.kube`: a local Kubernetes API server with a Job controller and a fake kubelet,
  for testing pod runs without a cluster (any client works against it).
- `runlane.testing.fakes`: `ScriptedExecutor`, an `Executor` with no process behind it, whose runs
  do what a test scripts (finish now or when released, fail to start, hang until cancelled).
- `runlane.testing.chaos`: the chaos harness (real launchers killed and stalled on PostgreSQL).
- `runlane.testing.clock`: clocks a test moves by hand.

Nothing in the product imports this package: it is a product for tests, with the same care for
its interfaces, and never a dependency of the launcher or the CLI at run time.
"""

from __future__ import annotations
