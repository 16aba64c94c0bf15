"""Roles and job globs (`runlane.core.access`) and the check every write operation makes
(`Requester.require`)."""

from __future__ import annotations

import pytest

from runlane.core.access import Access, Role
from runlane.errors import Forbidden
from runlane.service.operations.arguments import Requester


def test_roles_are_ordered_viewer_operator_admin() -> None:
    assert [role.rank for role in (Role.VIEWER, Role.OPERATOR, Role.ADMIN)] == [0, 1, 2]
    assert Role("operator") is Role.OPERATOR


@pytest.mark.parametrize(
    ("role", "need", "allowed"),
    [
        (Role.VIEWER, Role.VIEWER, True),
        (Role.VIEWER, Role.OPERATOR, False),
        (Role.OPERATOR, Role.OPERATOR, True),
        (Role.OPERATOR, Role.ADMIN, False),
        (Role.ADMIN, Role.OPERATOR, True),
        (Role.ADMIN, Role.ADMIN, True),
    ],
)
def test_a_role_allows_what_needs_it_or_less(role: Role, need: Role, allowed: bool) -> None:
    assert Access(role).allows(need) is allowed
    assert Access(role).allows(need, "any-job") is allowed


def test_globs_limit_the_jobs_a_grant_writes() -> None:
    access = Access(Role.OPERATOR, ("etl.*", "report-?"))
    assert access.allows(Role.OPERATOR, "etl.load")
    assert access.allows(Role.OPERATOR, "report-1")
    assert not access.allows(Role.OPERATOR, "report-12")
    assert not access.allows(Role.OPERATOR, "ETL.load")  # job names are case-sensitive
    assert not access.allows(Role.OPERATOR, "backup")
    assert access.allows(Role.OPERATOR)  # an action on no job is not limited by the globs
    assert not Access(Role.ADMIN, ("etl.*",)).allows(Role.OPERATOR, "backup")


def test_the_local_cli_may_do_everything() -> None:
    Requester("alice").require(Role.ADMIN, jobs=["anything"], action="create token")


def test_require_names_the_role_needed_and_the_role_held() -> None:
    viewer = Requester("dash", access=Access(Role.VIEWER))
    with pytest.raises(Forbidden) as caught:
        viewer.require(Role.OPERATOR, jobs=["etl.load"], action="run")
    assert "operator" in caught.value.message
    assert "viewer" in caught.value.message
    assert "'dash'" in caught.value.message


def test_require_names_the_job_outside_the_globs() -> None:
    scoped = Requester("ci", access=Access(Role.OPERATOR, ("etl.*",)))
    scoped.require(Role.OPERATOR, jobs=["etl.load", "etl.clean"], action="run chain")
    with pytest.raises(Forbidden) as caught:
        scoped.require(Role.OPERATOR, jobs=["etl.load", "backup"], action="run chain")
    assert "'backup'" in caught.value.message
    assert "etl.*" in caught.value.message
    assert caught.value.http_status == 403
