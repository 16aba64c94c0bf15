"""The catalog's JSON Schema, exported from the pydantic models for editors and infra CI."""

from __future__ import annotations

import json
from typing import Any

from runlane.catalog.models import Catalog

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def catalog_json_schema() -> dict[str, Any]:
    """The JSON Schema of `catalog.yaml` (field names as written in the file, e.g. `global`)."""
    schema = Catalog.model_json_schema(by_alias=True, mode="validation")
    return {"$schema": SCHEMA_DIALECT, "title": "runlane catalog", **schema}


def catalog_json_schema_text() -> str:
    """The schema as committed in docs/catalog.schema.json: pretty, sorted keys, final newline."""
    return json.dumps(catalog_json_schema(), indent=2, sort_keys=True) + "\n"
