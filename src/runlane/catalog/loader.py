"""Load `catalog.yaml` and report every problem at once as `FILE:LINE:COL: message`.

The YAML is read with positions (`yaml_source`), pydantic validates each section with all its
errors collected (translated in `problems`), and the cross-references are checked on top
(`checks`). Nothing malformed ever escapes as a traceback: it all ends as one CatalogError.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from runlane.catalog.checks import ValidSections, check_cross_references, check_name
from runlane.catalog.models import (
    AlertSettings,
    Catalog,
    Chain,
    Defaults,
    GlobalSettings,
    Job,
    Profile,
)
from runlane.catalog.problems import (
    Loc,
    ProblemReport,
    field_names,
    got,
    report_validation_errors,
    unknown_field,
)
from runlane.catalog.yaml_source import read_yaml
from runlane.errors import CatalogError

SUPPORTED_VERSION = 1


def load_catalog(path: str | os.PathLike[str]) -> Catalog:
    """Read and validate the catalog file at `path`. Raises CatalogError listing every problem."""
    name = os.fspath(path)
    try:
        raw = Path(name).read_bytes()
    except FileNotFoundError:
        raise CatalogError(f"{name}: file not found", [f"{name}: file not found"]) from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise CatalogError(
            f"{name}: cannot read: {reason}", [f"{name}: cannot read: {reason}"]
        ) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        problem = f"{name}:{line}:{col}: the file is not UTF-8 text"
        raise CatalogError(f"{name}: 1 error", [problem]) from None
    return parse_catalog_text(text, filename=name)


def parse_catalog_text(text: str, filename: str = "catalog.yaml") -> Catalog:
    """Validate catalog YAML given as text; `filename` is used in the problem positions."""
    report = ProblemReport()
    catalog: Catalog | None = None
    try:
        data = read_yaml(text, report)
        if data is not None:
            catalog = _validate(data, report)
    except RecursionError:
        report.add_at((1, 1), "the document is nested too deeply")
    if catalog is None and not report.problems:
        report.add_at((1, 1), "the catalog could not be read")
    if report.problems or catalog is None:
        raise report.as_error(filename)
    return catalog


_SECTIONS_OF_NAMED: dict[str, tuple[str, type[BaseModel]]] = {
    "profiles": ("profile", Profile),
    "jobs": ("job", Job),
    "chains": ("chain", Chain),
}


def _validate(data: Any, report: ProblemReport) -> Catalog | None:
    if not isinstance(data, dict):
        report.add(
            (), "the catalog must be a mapping with `version`, `jobs` and friends at the top"
        )
        return None
    allowed = field_names(Catalog)
    for key in data:
        if key not in allowed:
            report.add((key,), unknown_field(key, "the catalog", allowed), key=True)
    _check_version(data, report)

    valid = ValidSections()
    raw_global, raw_defaults = data.get("global"), data.get("defaults")
    valid.global_ = _validate_model(
        GlobalSettings, {} if raw_global is None else raw_global, ("global",), report
    )
    valid.defaults = _validate_model(
        Defaults, {} if raw_defaults is None else raw_defaults, ("defaults",), report
    )
    raw_alerts = data.get("alerts")
    _validate_model(AlertSettings, {} if raw_alerts is None else raw_alerts, ("alerts",), report)
    for section, (kind, model) in _SECTIONS_OF_NAMED.items():
        entries = data.get(section)
        if entries is None:
            valid.names[section] = set()
            continue
        if not isinstance(entries, dict):
            report.add((section,), f"{section}: expected a mapping of {kind} names, {got(entries)}")
            valid.names[section] = set()
            continue
        valid.names[section] = set(entries)
        for name, body in entries.items():
            check_name(kind, name, (section, name), report)
            if body is None:
                body = {}
            checked = _validate_model(model, body, (section, name), report)
            if checked is not None:
                getattr(valid, section)[name] = checked
    check_cross_references(data, valid, report)
    if report.problems:
        return None
    try:
        return Catalog.model_validate(_without_empty_sections(data))
    except ValidationError as exc:  # a safety net: the sections above should have said it all
        report_validation_errors(exc, (), report)
        return None


def _without_empty_sections(data: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in data.items() if v is not None or k == "version"}
    for section in _SECTIONS_OF_NAMED:
        if isinstance(out.get(section), dict):
            out[section] = {n: ({} if b is None else b) for n, b in out[section].items()}
    return out


def _check_version(data: dict[str, Any], report: ProblemReport) -> None:
    if "version" not in data:
        report.add((), "missing required field 'version' (write `version: 1` at the top)")
        return
    version = data["version"]
    if not isinstance(version, int) or isinstance(version, bool):
        report.add(("version",), f"version must be the number 1, {got(version)}")
    elif version != SUPPORTED_VERSION:
        report.add(
            ("version",),
            f"unsupported catalog version {version}; this runlane reads version {SUPPORTED_VERSION}",
        )


_M = TypeVar("_M", bound=BaseModel)


def _validate_model(model: type[_M], value: Any, loc: Loc, report: ProblemReport) -> _M | None:
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        report_validation_errors(exc, loc, report)
        return None


def starter_catalog_text() -> str:
    """The commented starter catalog that `runlane init` writes (packaged as starter.yaml)."""
    return (resources.files("runlane.catalog") / "starter.yaml").read_text(encoding="utf-8")
