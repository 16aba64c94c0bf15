"""Sizes as the catalog writes them (`10MiB`, `100MB`, a number of bytes)."""

from __future__ import annotations

import pytest

from runlane.core.sizes import format_size, parse_size


@pytest.mark.parametrize(
    ("text", "size"),
    [
        (4096, 4096),
        ("4096", 4096),
        ("512B", 512),
        ("1KiB", 1024),
        ("1kB", 1000),
        ("10MiB", 10 * 1024 * 1024),
        ("10mi", 10 * 1024 * 1024),
        ("100MB", 100_000_000),
        ("100 M", 100_000_000),
        ("1.5GiB", 3 * 1024**3 // 2),
        ("2TiB", 2 * 1024**4),
        (2.9, 2),
        ("123456789012345678901234567890", 123456789012345678901234567890),
    ],
)
def test_parse_size(text: str | int | float, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("10XB", "expected a size such as 512KiB, 10MiB, 100MB or 1GiB"),
        ("", "expected a size"),
        ("MiB", "expected a size"),
        ("-5MiB", "expected a size"),
        ("1e6", "expected a size"),
        (True, "expected a size"),
        (float("nan"), "expected a size"),
        (-1, "a size cannot be negative, got -1"),
        ("\u0663MiB", "expected a size"),  # Arabic-Indic three: the JSON Schema refuses it too
        ("1.\u0665GiB", "expected a size"),
    ],
)
def test_bad_sizes_say_what_is_expected(text: str | int | float, message: str) -> None:
    with pytest.raises(ValueError, match="^" + message):
        parse_size(text)


@pytest.mark.parametrize(
    ("size", "text"),
    [(1024, "1KiB"), (10 * 1024 * 1024, "10MiB"), (1024**4, "1TiB"), (1500, "1500B"), (0, "0B")],
)
def test_format_size_round_trips(size: int, text: str) -> None:
    assert format_size(size) == text
    assert parse_size(text) == size
