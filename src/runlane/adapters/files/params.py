"""A run's spilled params: the values too large for its environment, as files in a private
directory (`core.envsplit` decides which)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from runlane.errors import TemporaryExecutorError


def write_params_dir(path: Path, files: dict[str, str]) -> None:
    """The spilled params as files in a fresh directory only this user can read."""
    try:
        shutil.rmtree(path, ignore_errors=True)  # a leftover of a killed launcher
        path.mkdir(mode=0o700)
        for name, content in files.items():
            fd = os.open(path / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(content)
    except OSError as exc:
        shutil.rmtree(path, ignore_errors=True)
        raise TemporaryExecutorError(
            f"cannot write the params files in {path}: {exc.strerror}", error_code="spawn_failed"
        ) from exc
