"""The exported JSON Schema: its shape, and that docs/catalog.schema.json has not drifted."""

from __future__ import annotations

from pathlib import Path

from runlane.catalog import catalog_json_schema
from runlane.catalog.schema import catalog_json_schema_text

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "catalog.schema.json"


def test_schema_uses_the_file_spelling_of_fields() -> None:
    schema = catalog_json_schema()
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert schema["title"] == "runlane catalog"
    assert "global" in schema["properties"]
    assert "global_" not in schema["properties"]
    assert schema["required"] == ["version"]
    assert schema["additionalProperties"] is False
    profile = schema["$defs"]["Profile"]["properties"]
    assert {"serviceAccount", "nodeSelector"} <= set(profile)


def test_reserved_fields_are_not_in_the_schema() -> None:
    job = catalog_json_schema()["$defs"]["Job"]
    assert job["additionalProperties"] is False
    assert not {"class", "group", "fan_out", "approval"} & set(job["properties"])


def test_durations_and_params_are_strings_in_the_schema() -> None:
    defs = catalog_json_schema()["$defs"]
    deadline = defs["Defaults"]["properties"]["deadline"]
    assert deadline["default"] == "1h"
    assert {"type": "number", "minimum": 0} in deadline["anyOf"]
    params = defs["Job"]["properties"]["params"]
    assert params["additionalProperties"]["type"] == "string"


def test_committed_schema_matches_the_models() -> None:
    assert COMMITTED.read_text() == catalog_json_schema_text(), (
        "docs/catalog.schema.json is out of date; regenerate it with "
        "`runlane catalog schema > docs/catalog.schema.json`"
    )
