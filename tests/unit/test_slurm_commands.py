"""How the Slurm executor reads a failed client call: slurmctld away is temporary (the run
waits), a refusal is permanent with Slurm's words, an unconfigured client is a config error."""

from __future__ import annotations

import pytest

from runlane.adapters.slurm.commands import Answer, failure
from runlane.errors import PermanentExecutorError, TemporaryExecutorError


def answer(stderr: str) -> Answer:
    return Answer(("sbatch",), 1, "", stderr)


@pytest.mark.parametrize(
    "stderr",
    [
        "sbatch: error: Batch job submission failed: Unable to contact slurm controller "
        "(connect failure)",
        "squeue: error: slurm_load_jobs error: Socket timed out on send/recv operation",
        "sbatch: error: Batch job submission failed: Resource temporarily unavailable",
    ],
)
def test_an_unreachable_controller_is_temporary(stderr: str) -> None:
    error = failure(answer(stderr), "sbatch")
    assert isinstance(error, TemporaryExecutorError)
    assert error.code == "slurm_unavailable"


def test_a_refusal_is_permanent_with_slurms_words() -> None:
    error = failure(
        answer(
            "sbatch: error: invalid partition specified: nosuch\n"
            "sbatch: error: Batch job submission failed: Invalid partition name specified\n"
        ),
        "sbatch",
    )
    assert isinstance(error, PermanentExecutorError)
    assert error.code == "slurm_refused"
    assert "Invalid partition name specified" in str(error)


def test_an_unconfigured_client_is_a_config_error() -> None:
    error = failure(answer("sbatch: fatal: Could not establish a configuration source"), "sbatch")
    assert isinstance(error, PermanentExecutorError)
    assert error.code == "config_error"
