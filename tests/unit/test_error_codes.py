"""docs/errors.md lists every error code: each `RunlaneError` subclass in any runlane module has
its `code` in the table (a new error without a documented code fails here)."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import runlane
from runlane.errors import RunlaneError

DOC = Path(__file__).resolve().parents[2] / "docs" / "errors.md"


def every_error_class() -> set[type[RunlaneError]]:
    for info in pkgutil.walk_packages(runlane.__path__, "runlane."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
    found: set[type[RunlaneError]] = set()
    todo: list[type[RunlaneError]] = [RunlaneError]
    while todo:
        cls = todo.pop()
        found.add(cls)
        todo.extend(cls.__subclasses__())
    return found


def test_every_error_code_is_in_docs_errors_md() -> None:
    first_cells = [
        line.split("|")[1] for line in DOC.read_text().splitlines() if line.startswith("| `")
    ]
    documented = {code for cell in first_cells for code in re.findall(r"`([a-z_]+)`", cell)}
    missing = sorted(
        f"{cls.__module__}.{cls.__qualname__}: {cls.code}"
        for cls in every_error_class()
        if cls.code not in documented
    )
    assert missing == []


def test_the_codes_a_person_can_cause_have_an_exit_code_and_an_http_status() -> None:
    rows = re.findall(r"^\| `([a-z_]+)` \| [^|]+ \| (\d|—) \| (\d{3}|—) \|", DOC.read_text(), re.M)
    table = {code: (exit_code, status) for code, exit_code, status in rows}
    for cls in every_error_class():
        if cls.code in table and table[cls.code][0] != "—":
            assert int(table[cls.code][0]) == cls.exit_code, cls
    assert table["unknown_run"] == ("1", "404")
    assert table["overlap_refused"] == ("3", "409")


def test_every_error_class_answers_the_http_status_of_the_table() -> None:
    """`http_status` is what the API sends; the table is what clients read: they must agree.
    Codes outside the table of codes a person can cause are internal and answer 500."""
    rows = re.findall(
        r"^\| `([a-z_]+)` \| [^|]+ \| (?:\d|—) \| (\d{3}|—) \|", DOC.read_text(), re.M
    )
    table = dict(rows)
    wrong = sorted(
        f"{cls.__module__}.{cls.__qualname__}: {cls.code} answers {cls.http_status}, "
        f"the table says {table.get(cls.code, '500 (internal)')}"
        for cls in every_error_class()
        if table.get(cls.code, "500") != "—" and cls.http_status != int(table.get(cls.code, "500"))
    )
    assert wrong == []
    assert table["confirmation_required"] == "422"
    assert table["unauthenticated"] == "401"
    assert table["forbidden"] == "403"
