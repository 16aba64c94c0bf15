"""Pure logic: run states and transitions, dedupe keys, admission, durations. No I/O, no clock reads."""

from __future__ import annotations
