"""The committed OpenAPI document (docs/openapi.json) and the reference rendered from it
(docs/api.md, below its marker) are what the code builds: a route, a field or a docstring
changed without regenerating them fails here, naming the command that regenerates both."""

from __future__ import annotations

import json
from pathlib import Path

from runlane.api.openapi import REGENERATE, api_markdown, build_spec, intro_of, spec_text

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_docs_openapi_json_is_what_the_app_serves() -> None:
    built = build_spec()
    committed = json.loads((DOCS / "openapi.json").read_text())
    assert committed == built, f"docs/openapi.json is out of date: run `{REGENERATE}`"
    assert (DOCS / "openapi.json").read_text() == spec_text(built), f"run `{REGENERATE}`"


def test_docs_api_md_reference_is_generated_from_the_spec() -> None:
    text = (DOCS / "api.md").read_text()
    assert text == api_markdown(intro_of(text), build_spec()), (
        f"docs/api.md's reference is out of date: run `{REGENERATE}`"
    )


def test_the_spec_is_openapi_3_1_and_every_error_is_a_problem() -> None:
    spec = build_spec()
    assert spec["openapi"] == "3.1.0"
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            for status, answer in op["responses"].items():
                if status.startswith(("4", "5")):
                    assert list(answer["content"]) == ["application/problem+json"], (
                        method,
                        path,
                        status,
                    )
            if path not in ("/healthz", "/readyz"):
                assert op["security"] == [{"bearer": []}], (method, path)
