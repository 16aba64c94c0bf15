"""How the CLI prints a run's output items (`logs`, `logs --follow`, `run --wait`): piped, the
log file's bytes as they are, as `logs` prints the whole file."""

from __future__ import annotations

import pytest

from runlane.cli.commands.runs import print_output
from runlane.service.operations import OutputBytes, OutputText


def test_followed_output_piped_is_the_log_files_bytes(
    capfdbinary: pytest.CaptureFixture[bytes],
) -> None:
    # As follow_run reads a log file that is not UTF-8: its text decoded, its bytes kept.
    data = b"caf\xe9 \x1b[31mred\n"
    print_output(OutputText(data.decode("utf-8", "replace"), data))
    print_output(OutputText("a saved tail\n"))  # no file read: its text
    print_output(OutputBytes(data))  # `logs` without --follow
    assert capfdbinary.readouterr().out == data + b"a saved tail\n" + data
