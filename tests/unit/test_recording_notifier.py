"""The recording Notifier double (`runlane.testing.notify`) behaves as the port says."""

from __future__ import annotations

import pytest

from runlane.ports import Notification, Notifier
from runlane.ports.notifier import NotifyPermanentError, NotifyTemporaryError
from runlane.testing.notify import RecordingNotifier

FIRING = Notification("run_failed:nightly", "firing", "critical", "nightly failed", "exit 1")
RESOLVED = Notification("run_failed:nightly", "resolved", "info", "nightly ok", "exit 0")


async def test_it_records_what_it_accepts_and_fails_as_scripted() -> None:
    recorder = RecordingNotifier()
    notifier: Notifier = recorder
    recorder.fail_next(NotifyTemporaryError("429", retry_after=5.0))
    with pytest.raises(NotifyTemporaryError) as busy:
        await notifier.send(FIRING, within=2.0)
    assert busy.value.retry_after == 5.0
    await notifier.send(FIRING, within=2.0)
    await notifier.send(RESOLVED, within=2.0)
    assert recorder.fingerprints() == [
        ("run_failed:nightly", "firing"),
        ("run_failed:nightly", "resolved"),
    ]
    assert recorder.withins == [2.0, 2.0, 2.0]
    recorder.fail_next(NotifyPermanentError("401 unauthorized"))
    with pytest.raises(NotifyPermanentError):
        await notifier.send(FIRING, within=1.0)
    assert len(recorder.sent) == 2
