"""glibc's `posix_spawn` called through ctypes, so the GIL is released while the child starts.

Why: CPython 3.11's `os.posix_spawn` holds the GIL for the whole call, and glibc's posix_spawn
is a vfork (`clone(CLONE_VM | CLONE_VFORK)`): the calling thread waits there until the child has
exec'd, about 0.2 ms for `true` here. On the event-loop thread that is 0.2 ms a run of a
launcher doing nothing else; on a worker thread holding the GIL it stops the loop just the same.
A ctypes foreign call drops the GIL, so a spawn on a worker thread lets the loop run while the
child execs (`bench/gil_spawn.py` measures both; docs/performance.md has the figures).

What the child is given is what `Spawner._posix_spawn` gives it: stdin from `devnull`, stdout
and stderr on the pipe, a new process group (`setpgroup=0`), SIGPIPE/SIGXFSZ back at their
defaults, the environment as given, nothing else inherited (every other descriptor of the
launcher is close-on-exec). Errors come back as the OSError `os.posix_spawn` raises.

glibc on Linux only (`available()`); the flag values below are glibc's `spawn.h`.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
from functools import cache

_POSIX_SPAWN_SETPGROUP = 0x02
_POSIX_SPAWN_SETSIGDEF = 0x04
# glibc's posix_spawnattr_t is 336 bytes, posix_spawn_file_actions_t 80, sigset_t 128 on
# x86-64 and arm64; room to spare, and only ever handled through libc's own functions.
_ATTR_BYTES = 1024
_ACTIONS_BYTES = 256
_SIGSET_BYTES = 256
_ENCODED_MAX = 4096  # encoded environment entries kept


@cache
def available() -> bool:
    """True where glibc's posix_spawn can be called this way (Linux, glibc)."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return all(
            hasattr(libc, name)
            for name in (
                "posix_spawn",
                "posix_spawnattr_init",
                "posix_spawnattr_setflags",
                "posix_spawnattr_setpgroup",
                "posix_spawnattr_setsigdefault",
                "posix_spawn_file_actions_init",
                "posix_spawn_file_actions_adddup2",
                "posix_spawn_file_actions_destroy",
                "sigemptyset",
                "sigaddset",
            )
        )
    except OSError:  # pragma: no cover - no libc to load
        return False


class LibcSpawn:
    """One prepared spawn attribute set (process group, signal defaults), shared by every call:
    posix_spawn only reads it, so calls on several threads at once are safe."""

    def __init__(self, restored_signals: tuple[int, ...]) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self._spawn = libc.posix_spawn
        self._spawn.argtypes = [
            ctypes.POINTER(ctypes.c_int),
            ctypes.c_char_p,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_void_p,
        ]
        self._spawn.restype = ctypes.c_int
        self._actions_init = libc.posix_spawn_file_actions_init
        self._actions_dup2 = libc.posix_spawn_file_actions_adddup2
        self._actions_destroy = libc.posix_spawn_file_actions_destroy
        self._encoded: dict[tuple[str, str], bytes] = {}
        self._attr = ctypes.create_string_buffer(_ATTR_BYTES)
        sigset = ctypes.create_string_buffer(_SIGSET_BYTES)
        _check(libc.sigemptyset(sigset), "sigemptyset")
        for signum in restored_signals:
            _check(libc.sigaddset(sigset, int(signum)), "sigaddset")
        _check(libc.posix_spawnattr_init(self._attr), "posix_spawnattr_init", errno_return=True)
        _check(
            libc.posix_spawnattr_setflags(
                self._attr, ctypes.c_short(_POSIX_SPAWN_SETPGROUP | _POSIX_SPAWN_SETSIGDEF)
            ),
            "posix_spawnattr_setflags",
            errno_return=True,
        )
        _check(libc.posix_spawnattr_setpgroup(self._attr, 0), "posix_spawnattr_setpgroup", True)
        _check(
            libc.posix_spawnattr_setsigdefault(self._attr, sigset),
            "posix_spawnattr_setsigdefault",
            errno_return=True,
        )

    def spawn(
        self, executable: str, argv: list[str], env: dict[str, str], stdin: int, stdout: int
    ) -> int:
        """Spawn `executable` with `argv` and `env`: stdin from `stdin`, stdout and stderr on
        `stdout`, in a new process group. Returns the pid; raises OSError (as exec would) or
        ValueError (a NUL byte in an argument or variable)."""
        path = _encode(executable)
        args = [_encode(a) for a in argv]
        # Most of a run's environment is the launcher's own, the same strings every run:
        # encoded once (encoding ~40 variables per spawn would cost more than the spawn call).
        cache = self._encoded
        envs = []
        for item in env.items():
            entry = cache.get(item)
            if entry is None:
                key, value = item
                name = _encode(key)
                if not name or b"=" in name:
                    raise ValueError(f"illegal environment variable name {key!r}")
                entry = name + b"=" + _encode(value)
                if len(cache) >= _ENCODED_MAX:
                    cache.clear()  # per-run values (RUN_ID, ...) fill it up; start again
                cache[item] = entry
            envs.append(entry)
        argv_c = (ctypes.c_char_p * (len(args) + 1))(*args, None)
        env_c = (ctypes.c_char_p * (len(envs) + 1))(*envs, None)
        actions = ctypes.create_string_buffer(_ACTIONS_BYTES)
        _check(self._actions_init(actions), "posix_spawn_file_actions_init", errno_return=True)
        try:
            for fd, target in ((stdin, 0), (stdout, 1), (stdout, 2)):
                _check(self._actions_dup2(actions, fd, target), "adddup2", errno_return=True)
            pid = ctypes.c_int(0)
            # The GIL is released for the call (ctypes): the vfork wait happens without it.
            rc = self._spawn(ctypes.byref(pid), path, actions, self._attr, argv_c, env_c)
        finally:
            self._actions_destroy(actions)
        if rc != 0:
            raise OSError(rc, os.strerror(rc), executable)
        return pid.value


_FS_UTF8 = sys.getfilesystemencoding() == "utf-8" and sys.getfilesystemencodeerrors() == (
    "surrogateescape"
)


def _encode(text: str) -> bytes:
    # os.fsencode's own fast path, without its Python-level call overhead
    data = text.encode("utf-8", "surrogateescape") if _FS_UTF8 else os.fsencode(text)
    if b"\0" in data:
        raise ValueError("embedded null byte")
    return data


def _check(rc: int, what: str, errno_return: bool = False) -> None:
    if rc != 0:
        code = rc if errno_return else ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
