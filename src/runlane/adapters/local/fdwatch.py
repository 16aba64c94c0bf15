"""The fd watcher: one epoll set on the event loop for every run's output pipe and pidfd."""

from __future__ import annotations

import asyncio
import contextlib
import select
from collections.abc import Callable

_HAS_EPOLL = hasattr(select, "epoll")


class FdWatcher:
    """Calls a callback when a descriptor is readable: the runs' output pipes and pidfds.

    On Linux one epoll set of its own, registered once with the event loop: adding and removing
    a descriptor is one C call each, and every ready descriptor of a loop iteration is handled
    in one callback, where `loop.add_reader` pays asyncio's bookkeeping for each of a run's four
    registrations. Elsewhere it is `loop.add_reader` itself. Callbacks must not add descriptors.
    """

    __slots__ = ("_callbacks", "_epoll", "_loop")

    def __init__(self) -> None:
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._epoll: select.epoll | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def add(self, fd: int, callback: Callable[[], None]) -> None:
        loop = asyncio.get_running_loop()
        self._callbacks[fd] = callback
        if not _HAS_EPOLL:  # pragma: no cover - Linux has epoll
            loop.add_reader(fd, callback)
            return
        if self._loop is not loop:
            self._attach(loop)
        assert self._epoll is not None
        self._epoll.register(fd, select.EPOLLIN)

    def ensure(self) -> None:
        """Make the epoll set and hand it to the running loop now, if not done yet: raises what
        making it raises (EMFILE at the descriptor limit) before a run is spawned, not once its
        process runs with nothing to watch it."""
        if _HAS_EPOLL:
            loop = asyncio.get_running_loop()
            if self._loop is not loop:
                self._attach(loop)

    def remove(self, fd: int) -> None:
        """Stop watching `fd`; call before closing it."""
        if self._callbacks.pop(fd, None) is None:
            return
        if self._epoll is not None:
            try:  # noqa: SIM105 - not contextlib.suppress: once per descriptor of every run
                self._epoll.unregister(fd)
            except OSError:  # already closed: the kernel dropped it
                pass
        elif not _HAS_EPOLL:  # pragma: no cover
            asyncio.get_running_loop().remove_reader(fd)

    def close(self) -> None:
        if self._epoll is not None:
            self._detach()
            self._epoll.close()
            self._epoll = None
        self._callbacks.clear()

    def _attach(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._epoll is None:
            self._epoll = select.epoll()
        else:
            self._detach()  # another loop than before (tests): its descriptors stay watched
        loop.add_reader(self._epoll.fileno(), self._dispatch)
        self._loop = loop

    def _detach(self) -> None:
        if self._loop is not None and self._epoll is not None:
            with contextlib.suppress(Exception):  # the old loop may be closed by now
                self._loop.remove_reader(self._epoll.fileno())
        self._loop = None

    def _dispatch(self) -> None:
        assert self._epoll is not None
        callbacks = self._callbacks
        ready = [(fd, callbacks.get(fd)) for fd, _ in self._epoll.poll(0)]
        for fd, callback in ready:
            # Still registered, and to the same callback: an earlier callback of this batch
            # may have removed (and closed) it.
            if callback is None or callbacks.get(fd) is not callback:
                continue
            try:
                callback()
            except Exception as exc:  # noqa: BLE001 - as asyncio does for a reader callback
                # Report it and go on: the set is level-triggered and polled in the same order,
                # so a callback that raises would otherwise starve every descriptor after it.
                assert self._loop is not None
                self._loop.call_exception_handler(
                    {"message": f"error in a run's descriptor callback (fd {fd})", "exception": exc}
                )
