"""Who may do what: the three roles and an access grant (a role plus job globs).

Pure decisions, shared by every face: the operations ask `Access.allows` before they write, so
the CLI, the HTTP API and the MCP server refuse the same requests the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from fnmatch import fnmatchcase


class Role(StrEnum):
    """What a requester may do, each role including the ones below it: a viewer reads; an
    operator also runs, cancels, pauses, resumes and emits; an admin also manages tokens."""

    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        """The role's place in viewer < operator < admin (0, 1, 2)."""
        return _RANKS[self]


_RANKS = {Role.VIEWER: 0, Role.OPERATOR: 1, Role.ADMIN: 2}


@dataclass(frozen=True, slots=True)
class Access:
    """A grant: `role`, and `jobs` — fnmatch globs (`etl.*`, `report-?`) that limit the grant's
    WRITES to the jobs they match. Empty = every job. Reads are never limited by the globs: a
    viewer of one job's runs sees the catalog anyway, and hiding names would not protect them.
    Matching is case-sensitive (`fnmatchcase`), as job names are."""

    role: Role
    jobs: tuple[str, ...] = ()

    def allows(self, need: Role, job: str | None = None) -> bool:
        """Whether this grant may do an action that needs `need` (on `job`, when the action
        touches one). A job outside the globs is refused even to an admin: the globs are the
        point of a scoped token."""
        if self.role.rank < need.rank:
            return False
        if job is None or not self.jobs:
            return True
        return any(fnmatchcase(job, glob) for glob in self.jobs)
