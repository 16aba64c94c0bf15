"""The notification targets of a catalog's `alerts:` section, built as notifiers: `${VAR}`
expanded from the launcher's environment, secrets kept out of every name and message."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from runlane.catalog.models import AlertSettings, NotifyTarget, env_references, expand_env
from runlane.ports.notifier import Notifier


@dataclass(frozen=True, slots=True)
class Target:
    """One notification target: its name, the levels it takes, its notifier."""

    name: str
    kind: str  # ntfy | webhook | a test double's
    levels: tuple[str, ...]
    notifier: Notifier

    def takes(self, level: str) -> bool:
        return level in self.levels


@dataclass(frozen=True, slots=True)
class TargetProblem:
    """A target that could not be built (an unset `${VAR}`): said by doctor and the log."""

    name: str
    problem: str


def _expand(value: str | None, environ: Mapping[str, str]) -> str | None:
    return None if value is None else expand_env(value, environ)


def build_target(spec: NotifyTarget, settings: AlertSettings, environ: Mapping[str, str]) -> Target:
    """The target `spec` describes; ValueError (naming unset variables) when it cannot be."""
    url = expand_env(spec.url, environ)
    levels = tuple(spec.levels)
    from runlane.service.wiring import build_notifier

    notifier = build_notifier(
        spec.kind,
        spec.target_name,
        url,
        token=_expand(spec.token, environ),
        secret=_expand(spec.secret, environ),
        body_format=spec.format,
        external_url=_expand(settings.ui_url, environ),
    )
    return Target(spec.target_name, spec.kind, levels, notifier)


def build_targets(
    settings: AlertSettings, environ: Mapping[str, str] | None = None
) -> tuple[list[Target], list[TargetProblem]]:
    """Every target the section names, and the ones that could not be built."""
    env = os.environ if environ is None else environ
    built: list[Target] = []
    problems: list[TargetProblem] = []
    for spec in settings.notify:
        try:
            built.append(build_target(spec, settings, env))
        except ValueError as exc:
            problems.append(TargetProblem(spec.target_name, str(exc)))
    return built, problems


def unset_variables(settings: AlertSettings, environ: Mapping[str, str]) -> dict[str, list[str]]:
    """By target name (and `ui_url`, `deadman_url`), the `${VAR}`s `environ` does not set."""
    out: dict[str, list[str]] = {}

    def check(name: str, *values: str | None) -> None:
        missing = sorted(
            {v for text in values if text for v in env_references(text) if v not in environ}
        )
        if missing:
            out[name] = missing

    for spec in settings.notify:
        check(spec.target_name, spec.url, spec.token, spec.secret)
    check("ui_url", settings.ui_url)
    check("deadman_url", settings.deadman_url)
    return out


def resolve_url(value: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """`ui_url` or `deadman_url` expanded; None when unset or naming an unset variable."""
    if value is None:
        return None
    try:
        return expand_env(value, os.environ if environ is None else environ)
    except ValueError:
        return None


async def close_targets(targets: Sequence[Target]) -> None:
    """Close the notifiers' connections (those that hold any)."""
    for target in targets:
        aclose = getattr(target.notifier, "aclose", None)
        if aclose is not None:
            await aclose()


__all__ = [
    "Target",
    "TargetProblem",
    "build_target",
    "build_targets",
    "close_targets",
    "resolve_url",
    "unset_variables",
]
