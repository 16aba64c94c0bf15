"""Deterministic DNS-1123 Job names and label values."""

from __future__ import annotations

import string

from hypothesis import given
from hypothesis import strategies as st

from runlane.adapters.kubernetes.names import (
    is_dns1123_label,
    is_label_value,
    job_name,
    label_value,
    params_config_map_name,
)

RUN = "0f1e2d3c-aaaa-bbbb-cccc-123456789abc"


def test_same_inputs_same_name() -> None:
    assert job_name("report", RUN, 1) == job_name("report", RUN, 1)
    assert job_name("report", RUN, 1) != job_name("report", RUN, 2)
    assert job_name("report", RUN, 1) != job_name("report", RUN[:-1] + "d", 1)


def test_shape() -> None:
    name = job_name("nightly.report_v2", RUN, 3)
    assert name.startswith("rl-nightly-report-v2-")
    assert name.endswith("-a3")
    assert is_dns1123_label(name)


def test_long_job_name_is_cut_without_a_trailing_dash() -> None:
    job = "a" * 40 + "-" + "b" * 40
    name = job_name(job, RUN, 12)
    assert len(name) <= 63
    assert is_dns1123_label(name)
    assert "--" not in name


def test_job_with_no_usable_characters() -> None:
    name = job_name("___", RUN, 1)
    assert is_dns1123_label(name)
    assert name.startswith("rl-")
    assert name.count("-") == 2


@given(
    job=st.text(alphabet=string.ascii_letters + string.digits + "._-", min_size=1, max_size=63),
    run_id=st.uuids().map(str),
    attempt=st.integers(min_value=1, max_value=10_000),
)
def test_always_a_dns1123_label(job: str, run_id: str, attempt: int) -> None:
    name = job_name(job, run_id, attempt)
    assert is_dns1123_label(name), name
    assert not name.endswith("-")
    assert len(params_config_map_name(name)) <= 253


@given(st.text(max_size=200))
def test_label_values_are_valid(text: str) -> None:
    assert is_label_value(label_value(text))


def test_label_value_keeps_what_is_allowed() -> None:
    assert label_value("nightly.report_v2") == "nightly.report_v2"
    assert label_value(RUN) == RUN
    assert label_value("-a b-") == "a-b"
