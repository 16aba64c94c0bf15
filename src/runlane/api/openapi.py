"""The API's OpenAPI document and its rendered reference, as committed under docs/.

    python -m runlane.api.openapi --write     # regenerate docs/openapi.json and docs/api.md

`docs/api.md` is a hand-written introduction followed by the reference generated from the
spec (below the GENERATED marker); drift tests fail when either committed copy differs from
what the code builds.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

GENERATED_MARKER = (
    "<!-- GENERATED BELOW by `python -m runlane.api.openapi --write`: do not edit -->"
)
REGENERATE = "python -m runlane.api.openapi --write"


def build_spec() -> dict[str, Any]:
    """The OpenAPI document of `create_app` (built without serving: no database is opened)."""
    from runlane.api.app import create_app
    from runlane.service.config import Settings

    return create_app(Settings(database_url="sqlite:///unused.db")).openapi()


def spec_text(spec: dict[str, Any] | None = None) -> str:
    """The document as committed: indented, keys in the app's order, a final newline."""
    return json.dumps(spec if spec is not None else build_spec(), indent=2) + "\n"


def _ref_name(schema: dict[str, Any]) -> str | None:
    ref = schema.get("$ref")
    return ref.rsplit("/", 1)[-1] if isinstance(ref, str) else None


def _type_text(schema: dict[str, Any]) -> str:
    name = _ref_name(schema)
    if name:
        return f"[{name}](#{name.lower()})"
    if "anyOf" in schema:
        return " or ".join(_type_text(s) for s in schema["anyOf"])
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {_type_text(schema.get('items', {}))}"
    if isinstance(kind, list):
        return " or ".join(kind)
    fmt = schema.get("format")
    return f"{kind} ({fmt})" if fmt else str(kind)


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


def reference_markdown(spec: dict[str, Any]) -> str:
    """The reference part of docs/api.md: every operation (its parameters, body, answers), then
    every schema with its fields."""
    out: list[str] = ["## Endpoints", ""]
    for path, methods in spec.get("paths", {}).items():
        for method, op in methods.items():
            out.append(f"### `{method.upper()} {path}`")
            out.append("")
            summary = op.get("description") or op.get("summary") or ""
            if summary:
                out.append(" ".join(summary.split()))
                out.append("")
            auth = "bearer token" if op.get("security") else "none"
            out.append(f"Authentication: {auth}.")
            out.append("")
            params = op.get("parameters", [])
            if params:
                out.append("| Parameter | In | Type | Required | Description |")
                out.append("|---|---|---|---|---|")
                for p in params:
                    out.append(
                        f"| `{p['name']}` | {p['in']} | {_cell(_type_text(p.get('schema', {})))} "
                        f"| {'yes' if p.get('required') else 'no'} "
                        f"| {_cell(p.get('description', ''))} |"
                    )
                out.append("")
            body = op.get("requestBody")
            if body:
                schema = body.get("content", {}).get("application/json", {}).get("schema", {})
                out.append(f"Body: {_type_text(schema)}.")
                out.append("")
            out.append("| Status | Answer |")
            out.append("|---|---|")
            for status, answer in op.get("responses", {}).items():
                contents = answer.get("content", {})
                shapes = [
                    f"{media}: {_type_text(c.get('schema', {}))}" for media, c in contents.items()
                ]
                text = _cell(answer.get("description", ""))
                if shapes:
                    text += " — " + _cell("; ".join(shapes))
                out.append(f"| {status} | {text} |")
            out.append("")
    out.append("## Schemas")
    out.append("")
    for name, schema in spec.get("components", {}).get("schemas", {}).items():
        out.append(f"### {name}")
        out.append("")
        doc = schema.get("description")
        if doc:
            out.append(" ".join(doc.split()))
            out.append("")
        props = schema.get("properties", {})
        if props:
            required = set(schema.get("required", []))
            out.append("| Field | Type | Required | Description |")
            out.append("|---|---|---|---|")
            for field, sub in props.items():
                out.append(
                    f"| `{field}` | {_cell(_type_text(sub))} | "
                    f"{'yes' if field in required else 'no'} | "
                    f"{_cell(sub.get('description', ''))} |"
                )
            out.append("")
        elif "enum" in schema:
            out.append("One of " + ", ".join(f"`{v}`" for v in schema["enum"]) + ".")
            out.append("")
    return "\n".join(out).rstrip() + "\n"


def api_markdown(intro: str, spec: dict[str, Any]) -> str:
    """docs/api.md: the hand-written `intro` (everything above the marker), then the reference."""
    return intro.rstrip() + "\n\n" + GENERATED_MARKER + "\n\n" + reference_markdown(spec)


def intro_of(text: str) -> str:
    """The hand-written part of docs/api.md (all of it when it has no marker yet)."""
    return text.split(GENERATED_MARKER, 1)[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runlane.api.openapi", description=__doc__)
    parser.add_argument(
        "--write", action="store_true", help="rewrite docs/openapi.json, docs/api.md"
    )
    parser.add_argument("--docs", default="docs", help="the docs directory (default docs)")
    args = parser.parse_args(argv)
    spec = build_spec()
    if not args.write:
        sys.stdout.write(spec_text(spec))
        return 0
    docs = Path(args.docs)
    (docs / "openapi.json").write_text(spec_text(spec))
    api_md = docs / "api.md"
    intro = intro_of(api_md.read_text()) if api_md.exists() else "# HTTP API\n"
    api_md.write_text(api_markdown(intro, spec))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
