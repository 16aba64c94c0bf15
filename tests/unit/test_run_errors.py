"""Every `error_code` the source can give a run has a sentence in `core.run_errors` (the run
page's explanation), and the table names no code the source has dropped."""

from __future__ import annotations

import re
from pathlib import Path

import runlane
from runlane.adapters.kubernetes.diagnose import WAITING_CODES
from runlane.core.run_errors import RUN_ERROR_TEXTS, explain_error_code
from runlane.core.slurm_states import STATE_ERROR_CODES

SRC = Path(runlane.__file__).parent
# `error_code="..."`, and the codes of the executor errors.
LITERAL = re.compile(r"""error_code\s*=\s*"([a-z_]+)"|code = "(executor_[a-z]+)\"""")
# The Kubernetes API's statuses as run codes (`ApiError.permanent`).
STATUS_CODE = re.compile(r"""\d{3}: "([a-z_]+)\"""")
# Passed on as variables, so no literal names them where they are written.
INDIRECT = {"start_timeout", "corrupt_params", "kubernetes_error", "unknown_job"}


def written_codes() -> set[str]:
    found: set[str] = set(WAITING_CODES.values()) | set(STATE_ERROR_CODES.values()) | INDIRECT
    for path in SRC.rglob("*.py"):
        for match in LITERAL.finditer(path.read_text()):
            found.update(g for g in match.groups() if g)
    found.update(STATUS_CODE.findall((SRC / "adapters/kubernetes/api.py").read_text()))
    return found


def test_every_code_written_has_a_sentence() -> None:
    missing = written_codes() - set(RUN_ERROR_TEXTS)
    assert not missing, f"no sentence in core/run_errors.py for {sorted(missing)}"


def test_the_table_names_only_codes_the_source_writes() -> None:
    # executor_error is the base class's code, raised through its subclasses' handlers.
    stale = set(RUN_ERROR_TEXTS) - written_codes() - {"executor_error"}
    assert not stale, f"codes no longer written: {sorted(stale)}"


def test_signals_and_unknown_codes_are_said_plainly() -> None:
    assert explain_error_code("signal_sigkill") == "The process was ended by a signal (SIGKILL)."
    assert explain_error_code(None) is None
    unknown = explain_error_code("from_the_future")
    assert unknown is not None
    assert "no description" in unknown
    for text in RUN_ERROR_TEXTS.values():
        assert text.endswith(".")
