"""The problem rendering on its own: the last-resort handler (500 `internal_error`, no
traceback, the error logged), the titles, and the trusted-proxy address check."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from starlette.testclient import TestClient

from runlane.api.auth import proxy_auth_of
from runlane.api.problems import TITLES, install_problem_handlers, problem
from runlane.errors import OverlapRefused, ParamError, RunlaneError
from runlane.service.config import Settings


def failing_app() -> FastAPI:
    app = FastAPI()
    install_problem_handlers(app)

    @app.get("/boom")
    async def boom() -> None:
        raise ValueError("secret internals")

    return app


def test_an_unexpected_error_is_a_500_problem_without_a_traceback() -> None:
    with TestClient(failing_app(), raise_server_exceptions=False) as client:
        r = client.get("/boom")
    assert r.status_code == 500
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["code"] == "internal_error"
    assert "secret internals" not in r.text
    assert "Traceback" not in r.text
    assert r.headers["x-content-type-options"] == "nosniff"


def test_every_code_a_person_causes_has_a_title() -> None:
    def codes(cls: type[RunlaneError]) -> set[str]:
        found = {cls.code}
        for sub in cls.__subclasses__():
            found |= codes(sub)
        return found

    # Internal outcomes (docs/errors.md, "Codes a person does not cause") answer 500 with the
    # generic title made of their code.
    internal = {"lease_lost", "invalid_transition", "executor_error", "executor_temporary"}
    internal |= {"executor_permanent", "notify_failed", "notify_temporary", "notify_permanent"}
    missing = codes(RunlaneError) - set(TITLES) - internal
    assert not missing


def test_problem_extras_point_at_every_param_and_name_the_active_run() -> None:
    refused = problem(ParamError("job 'x': a; b", [("week", "a"), ("a/b~c", "b")]))
    assert b'"pointer":"/params/week"' in refused.body
    assert b'"pointer":"/params/a~1b~0c"' in refused.body
    overlap = problem(OverlapRefused("busy", active_run_id="r1"))
    assert overlap.status_code == 409
    assert b'"active_run_id":"r1"' in overlap.body


def test_a_lone_surrogate_in_a_refusal_is_escaped_not_a_500() -> None:
    rendered = problem(ParamError("job 'x': bad", [("\ud800", "bad")]))
    assert b"\\ud800" in rendered.body


def test_proxies_are_trusted_only_from_their_networks(tmp_path: Path) -> None:
    auth = proxy_auth_of(
        Settings(http_trusted_proxies=("10.0.0.0/8", "::1"), http_group_roles=(("ops", "admin"),))
    )
    assert auth.trusts("10.1.2.3")
    assert auth.trusts("::1")
    assert not auth.trusts("127.0.0.1")
    assert not auth.trusts("not-an-address")
    assert not auth.trusts(None)
    assert not proxy_auth_of(Settings()).trusts("127.0.0.1")
