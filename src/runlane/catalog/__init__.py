"""The job catalog: typed models, the loader that reports file:line:col problems, JSON Schema."""

from __future__ import annotations

from runlane.catalog.loader import load_catalog, parse_catalog_text, starter_catalog_text
from runlane.catalog.models import (
    Catalog,
    Chain,
    ChainSchedule,
    ChainStep,
    Defaults,
    EventTrigger,
    GlobalSettings,
    Job,
    Profile,
    ResolvedJob,
    Schedule,
    Season,
    StepDependency,
    VolumeSpec,
)
from runlane.catalog.params import MAX_PARAMS_BYTES, ParamSpec, coerce_params
from runlane.catalog.schema import catalog_json_schema, catalog_json_schema_text

__all__ = [
    "MAX_PARAMS_BYTES",
    "Catalog",
    "Chain",
    "ChainSchedule",
    "ChainStep",
    "Defaults",
    "EventTrigger",
    "GlobalSettings",
    "Job",
    "ParamSpec",
    "Profile",
    "ResolvedJob",
    "Schedule",
    "Season",
    "StepDependency",
    "VolumeSpec",
    "catalog_json_schema",
    "catalog_json_schema_text",
    "coerce_params",
    "load_catalog",
    "parse_catalog_text",
    "starter_catalog_text",
]
