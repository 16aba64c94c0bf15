"""Retry dedupe keys: the first attempt's key + `#attempt`, whatever the first key holds."""

from __future__ import annotations

from runlane.core.runs import first_dedupe_key, retry_dedupe_key


def test_each_first_key_has_retry_keys_of_its_own_even_with_a_hash_in_it() -> None:
    keys = ["job@build.done@build#1", "job@build.done@build#7", "job@2031-01-01T00:00:00Z"]
    second = [retry_dedupe_key(first_dedupe_key(k, 1), 2) for k in keys]
    assert second == [f"{k}#2" for k in keys]
    third = [retry_dedupe_key(first_dedupe_key(k, 2), 3) for k in second]
    assert third == [f"{k}#3" for k in keys]
    assert len(set(second + third)) == 6
