"""The Kubernetes pod executor: runs as batch/v1 Jobs, watched by one shared watch per namespace."""

from __future__ import annotations
