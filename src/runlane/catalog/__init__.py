"""The job catalog: typed models, the loader that reports file:line:col problems, JSON Schema.

The names below are loaded on first use (PEP 562): the models and the YAML loader cost ~0.2 s
to import, and the CLI commands that never read a catalog (`runs`, `logs`, `cancel`, …) should
not pay it. `from runlane.catalog import Catalog` works as usual.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_WHERE = {
    "load_catalog": "loader",
    "parse_catalog_text": "loader",
    "starter_catalog_text": "loader",
    "Catalog": "models",
    "Chain": "models",
    "ChainSchedule": "models",
    "ChainStep": "models",
    "Defaults": "models",
    "EventTrigger": "models",
    "GlobalSettings": "models",
    "Job": "models",
    "Profile": "models",
    "ResolvedJob": "models",
    "Schedule": "models",
    "Season": "models",
    "StepDependency": "models",
    "VolumeSpec": "models",
    "MAX_PARAMS_BYTES": "params",
    "ParamSpec": "params",
    "coerce_params": "params",
    "catalog_json_schema": "schema",
    "catalog_json_schema_text": "schema",
}

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


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{where}"), name)
    globals()[name] = value  # once: later reads are plain module attributes
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
