"""What `runlane doctor` and `runlane status` say about alerting: targets that keep failing,
targets that cannot be built (an unset `${VAR}`), and the incidents open now."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from runlane.core.incidents import TargetHealth

if TYPE_CHECKING:
    from runlane.catalog import Catalog
    from runlane.ports import Store

Level = Literal["ok", "warning", "error"]
# A target is reported as failing (an error in doctor) after this many failures in a row.
FAILING_AFTER = 3


@dataclass(frozen=True, slots=True)
class AlertHealth:
    """Open incidents by rule, every target's record, the configured targets' names."""

    open_by_rule: Mapping[str, int]
    targets: tuple[TargetHealth, ...]
    configured: tuple[str, ...]
    unset: Mapping[str, list[str]]

    def failing(self) -> list[TargetHealth]:
        names = set(self.configured)
        return [t for t in self.targets if t.failures >= FAILING_AFTER and t.target in names]


async def alert_health(
    store: Store, catalog: Catalog | None, environ: Mapping[str, str] | None = None
) -> AlertHealth:
    """Read what the store knows about alerting (two small reads), and check the section's
    `${VAR}`s against `environ` (this process's: the launcher's may differ)."""
    configured: tuple[str, ...] = ()
    unset: dict[str, list[str]] = {}
    if catalog is not None:
        from runlane.service.alerts.targets import unset_variables

        configured = tuple(t.target_name for t in catalog.alerts.notify)
        unset = unset_variables(catalog.alerts, os.environ if environ is None else environ)
    return AlertHealth(
        open_by_rule=await store.open_incident_counts(),
        targets=tuple(await store.alert_targets()),
        configured=configured,
        unset=unset,
    )


def health_lines(health: AlertHealth) -> list[tuple[Level, str]]:
    """(level, message) lines: ok, warning or error, in a stable order."""
    lines: list[tuple[Level, str]] = []
    for target in health.failing():
        lines.append(
            (
                "error",
                f"notify target {target.target} failed {target.failures} times in a row "
                f"(last: {target.last_error})",
            )
        )
    for name, names in sorted(health.unset.items()):
        lines.append(
            (
                "warning",
                f"{name} uses {', '.join(names)}, not set here (the launcher's environment "
                "must set it)",
            )
        )
    if not lines:
        # Open incidents are the alerts' business, not a fault of this installation: said as
        # part of the ok line (`runlane alerts` lists them).
        text = f"{len(health.configured)} notify target(s)"
        open_total = sum(health.open_by_rule.values())
        if open_total:
            rules = ", ".join(f"{r} {n}" for r, n in sorted(health.open_by_rule.items()) if n)
            text += f"; {open_total} open incident(s): {rules} (`runlane alerts`)"
        else:
            text += ", no open incident"
        lines.append(("ok", text))
    return lines


__all__ = ["FAILING_AFTER", "AlertHealth", "alert_health", "health_lines"]
