"""Idempotency keys: a client that retries a write with the same `Idempotency-Key` gets the
first answer again instead of a second effect (the IETF httpapi draft's semantics, as Stripe
serves them).

The first request with a key reserves it (per owner: each token has its own keys) with the
fingerprint of the request; when it succeeds its status and body are kept for 24 hours, and a
request with the same key and fingerprint gets them back (`replayed`). The same key with
another request is refused (`idempotency_key_reused`), and while the first is still running
(`idempotency_key_in_flight`). A request that fails saves no answer: the key may be used again.
A reservation is the request's own (a random name it gives it): a request so slow that its key
was taken over as abandoned neither keeps its answer over the new reservation nor releases it.

The key and the effect are made atomic by the effect itself, not by this table: a write that
creates a run or a chain run writes it under `idempotency_dedupe_key(owner, key, fingerprint)`
as its dedupe key, so a retry after any failure (a timeout, a database error after the run was
committed, a process that died before the answer was kept) finds the run the first attempt
wrote instead of writing a second one.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import structlog

from runlane.errors import (
    IdempotencyKeyInFlight,
    IdempotencyKeyReused,
    InvalidArgument,
    StoreError,
)
from runlane.service.runtime import Runtime

KEY_TTL = 24 * 3600.0  # seconds a completed key is replayed; older ones are pruned
# A reservation still in flight this long after the request's timeout was left by a process
# that died mid-request (a live one completes or releases it): a retry may take it over.
ABANDONED_AFTER_TIMEOUT = 60.0
MAX_KEY_CHARS = 255
PRUNE_EVERY = 3600.0  # seconds between prunes of old keys, per process and store

log = structlog.get_logger("runlane.idempotency")
T = TypeVar("T")
_pruned: dict[int, float] = {}


@dataclass(frozen=True, slots=True)
class Replayable:
    """A response of an idempotent request: `replayed` when it is the stored one."""

    status: int
    body: dict[str, Any]
    replayed: bool


def check_key(key: str) -> str:
    """An Idempotency-Key: 1 to 255 printable ASCII characters."""
    if not 1 <= len(key) <= MAX_KEY_CHARS or not all(" " <= c <= "~" for c in key):
        raise InvalidArgument(
            f"Idempotency-Key: expected 1 to {MAX_KEY_CHARS} printable ASCII characters, "
            f"got {len(key)} characters"
        )
    return key


def request_fingerprint(method: str, path: str, body: object) -> str:
    """What makes two requests "the same" for a key: SHA-256 of the method, the path and the
    body as canonical JSON (sorted keys, no spaces), so key order and spacing do not count."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    text = f"{method.upper()}\n{path}\n{canonical}"
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def idempotency_dedupe_key(owner: str, key: str, fingerprint: str) -> str:
    """The dedupe key of the run (or chain run) created by the request `fingerprint` under
    `owner`'s Idempotency-Key `key`: the same for every retry of that request, another for
    another owner, key or request (so a key released and reused for another body writes
    another run)."""
    digest = hashlib.sha256(
        f"{owner}\0{key}\0{fingerprint}".encode("utf-8", "surrogatepass")
    ).hexdigest()
    return f"idem:{digest}"


# A run made under a key's dedupe key this long (by the store's clock) before now belongs to an
# earlier life of the key: the key has expired since (KEY_TTL) and been used again.
_CLOCK_SLACK = 300.0  # below this much older by the local clock, no need to ask the database


async def this_lifes_effect(
    rt: Runtime,
    dedupe_key: str,
    make: Callable[[str], Awaitable[tuple[T, str, datetime]]],
) -> T:
    """`make(dedupe_key)` (it writes a run or a chain run under the key's dedupe key, or finds
    the one written there, and returns it with its id and when it was made), for this life of
    the key. The dedupe key is unique in the run log forever while an Idempotency-Key is kept
    only `KEY_TTL`: the same key and request sent again after it expired is a new request, and
    must not be answered with the day-old run. So a found run older than `KEY_TTL` sends the
    write on to `<dedupe key>@<that run's id>`, and on through the key's earlier lives (one link
    per reuse at least a day apart) to the run of this one, written if there is none yet. A
    retry after a failure within the key's life finds the same run, as before."""
    effect, made_id, made_at = await make(dedupe_key)
    while await _from_an_earlier_life(rt, made_at):
        effect, made_id, made_at = await make(next_life_dedupe_key(dedupe_key, made_id))
    return effect


def next_life_dedupe_key(dedupe_key: str, earlier_id: str) -> str:
    """The dedupe key of the key's life after the one whose run (chain run) is `earlier_id`."""
    return f"{dedupe_key}@{earlier_id}"


def _wall_now() -> datetime:
    return datetime.now(UTC)


async def _from_an_earlier_life(rt: Runtime, made_at: datetime) -> bool:
    age = _wall_now() - made_at
    if age.total_seconds() < KEY_TTL - _CLOCK_SLACK:
        return False  # (the common case: no round trip)
    return (await rt.store.now() - made_at).total_seconds() >= KEY_TTL


async def idempotent(
    rt: Runtime,
    *,
    owner: str,
    key: str,
    fingerprint: str,
    action: Callable[[], Awaitable[tuple[int, dict[str, Any]]]],
) -> Replayable:
    """Run `action` once per (owner, key) as described above. `invalid_argument` for a bad
    key. Whatever `action` raises (a `RunlaneError` included) releases the key and
    propagates; a non-2xx answer is returned but not kept. Releasing after a failure that
    came once the effect was written is safe only because the effect is keyed by
    `idempotency_dedupe_key` (see the module's docstring): the retry runs `action` again and
    it answers with what it wrote the first time."""
    check_key(key)
    await _prune_now_and_then(rt)
    # The HTTP settings come with the API's configuration; until then, its default timeout.
    timeout = rt.settings.http_request_timeout
    reservation = secrets.token_hex(16)
    held = await rt.store.reserve_key(
        owner,
        key,
        fingerprint,
        reservation=reservation,
        ttl=KEY_TTL,
        abandoned=timeout + ABANDONED_AFTER_TIMEOUT,
    )
    if held is not None:
        if held.fingerprint != fingerprint:
            raise IdempotencyKeyReused(
                f"Idempotency-Key {key!r} was used with another request in the last 24 hours: "
                "use a new key for a new request"
            )
        if held.status is None or held.body is None:
            raise IdempotencyKeyInFlight(
                f"a request with Idempotency-Key {key!r} is still being processed: retry later"
            )
        body = json.loads(held.body)
        return Replayable(held.status, body if isinstance(body, dict) else {}, replayed=True)
    try:
        status, body = await action()
    except BaseException:
        # Nothing was saved (a refusal), or we cannot know (a cancellation): a retry may run
        # it. Released even when cancelled, or the key would stay in flight until abandoned.
        await _release(rt, owner, key, reservation)
        raise
    if 200 <= status < 300:
        text = json.dumps(body, separators=(",", ":"))
        try:
            kept = await rt.store.complete_key(owner, key, status, text, reservation=reservation)
        except StoreError as exc:
            # The effect is written and this is its answer: the client gets it. Unkept, the
            # key is released rather than left in flight until abandoned; a retry runs
            # `action` again, which finds what it wrote (its dedupe key) and answers alike.
            log.warning("idempotency.complete_failed", owner=owner, error=exc.code)
            await _release(rt, owner, key, reservation)
        else:
            if not kept:
                # Slower than the takeover window: the key is another request's now, whose
                # answer (the same effect, by its dedupe key) is the one kept.
                log.warning("idempotency.reservation_lost", owner=owner)
    else:
        await _release(rt, owner, key, reservation)
    return Replayable(status, body, replayed=False)


async def _release(rt: Runtime, owner: str, key: str, reservation: str) -> None:
    """Release a reservation (this request's own only: a key taken over since is left to the
    request that holds it); a database that fails here leaves it to be taken over once
    abandoned, and the caller's own outcome (the refusal it is raising) reaches the client."""
    try:
        await rt.store.release_key(owner, key, reservation=reservation)
    except StoreError as exc:
        log.warning("idempotency.release_failed", owner=owner, error=exc.code)


async def _prune_now_and_then(rt: Runtime) -> None:
    now = time.monotonic()
    store_id = id(rt.store)
    if now - _pruned.get(store_id, -PRUNE_EVERY) >= PRUNE_EVERY:
        _pruned[store_id] = now
        await rt.store.prune_keys(KEY_TTL)


__all__ = [
    "KEY_TTL",
    "Replayable",
    "check_key",
    "idempotency_dedupe_key",
    "idempotent",
    "next_life_dedupe_key",
    "request_fingerprint",
    "this_lifes_effect",
]
