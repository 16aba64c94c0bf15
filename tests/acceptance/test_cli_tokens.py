"""`runlane token create|list|revoke` and `runlane audit` as a person uses them (real processes,
SQLite): the secret is printed once and authenticates; lists never show it; a revoked token
stops authenticating; the audit log lists what the API recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runlane.core.access import Access, Role
from runlane.errors import Unauthenticated
from runlane.service import operations
from runlane.service.config import Settings
from runlane.service.operations import Requester
from runlane.service.runtime import open_runtime
from tests.acceptance.cli_process import cli_env, runlane

CATALOG = """
version: 1
defaults: {executor: inline, deadline: 1m}
jobs:
  etl.load: {command: ["true"]}
"""


def settings_of(env: dict[str, str]) -> Settings:
    return Settings(database_url=env["RUNLANE_DATABASE_URL"], catalog_path=env["RUNLANE_CATALOG"])


async def test_tokens_and_the_audit_log_through_the_cli(tmp_path: Path) -> None:
    env = cli_env(tmp_path, CATALOG)

    made = runlane(
        "token", "create", "ci", "--role", "operator", "--jobs", "etl.*", "--expires", "30d",
        env=env,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    header, secret, note = made.stdout.strip().splitlines()
    assert header.startswith("created token ci: role operator, jobs etl.*, expires 20")
    assert secret.startswith("rl_")
    assert note == "this secret is shown once and cannot be shown again: store it now"

    admin = runlane("token", "create", "root", "--role", "admin", "--json", env=env)
    assert admin.returncode == 0, admin.stderr
    admin_data = json.loads(admin.stdout)
    assert admin_data["token"]["role"] == "admin"
    assert admin_data["token"]["jobs"] == []
    assert admin_data["secret"].startswith(admin_data["token"]["prefix"])

    taken = runlane("token", "create", "ci", "--role", "viewer", "--json", env=env)
    assert taken.returncode == 2
    assert json.loads(taken.stdout)["error"] == "token_exists"
    assert taken.stderr.strip() == "error: a token named 'ci' exists already"

    listed = runlane("token", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert [t["name"] for t in json.loads(listed.stdout)] == ["ci", "root"]
    assert secret[10:] not in listed.stdout
    assert admin_data["secret"][10:] not in listed.stdout

    async with open_runtime(settings_of(env), catalog=False) as rt:
        who = await operations.authenticate(rt, secret)
        assert who.name == "ci"
        assert who.access == Access(Role.OPERATOR, ("etl.*",))
        await operations.record_audit(
            rt, requester=who, action="run_job", target="etl.load", outcome="ok",
            remote="192.0.2.9",
        )  # fmt: skip

    revoked = runlane("token", "revoke", "ci", env=env)
    assert revoked.returncode == 0, revoked.stderr
    assert revoked.stdout.strip() == "revoked token ci"

    table = runlane("token", "list", env=env)
    assert table.returncode == 0, table.stderr
    rows = {line.split()[0]: line.split() for line in table.stdout.splitlines()[1:]}
    assert rows["ci"][4] == "revoked"
    assert rows["root"][4] == "active"
    assert secret[10:] not in table.stdout

    async with open_runtime(settings_of(env), catalog=False) as rt:
        with pytest.raises(Unauthenticated):
            await operations.authenticate(rt, secret)
        (ci, _) = await operations.list_tokens(rt, requester=Requester("cli"))
        assert ci.revoked_at is not None
        assert ci.last_used_at is not None  # the authentication above touched it

    audit = runlane("audit", "--json", env=env)
    assert audit.returncode == 0, audit.stderr
    (entry,) = json.loads(audit.stdout)
    assert (entry["actor"], entry["action"], entry["target"]) == ("ci", "run_job", "etl.load")
    assert (entry["outcome"], entry["remote"]) == ("ok", "192.0.2.9")
    assert entry["at"].endswith("Z")
