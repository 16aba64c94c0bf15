"""The `runlane` command: the typer app assembled from the command modules, and `main`.

Every command reads its settings from flags, then the environment (`RUNLANE_*`), then defaults,
calls one operation of `runlane.service.operations` and prints its result. Errors a person can
cause print one line on stderr and exit non-zero; never a traceback.
"""

from __future__ import annotations

import sys

import typer

from runlane.cli import output
from runlane.cli.commands import (
    access,
    alerts,
    demo,
    docs,
    jobs,
    mcp,
    runs,
    setup,
    status,
    triggers,
)
from runlane.cli.inputs import invalid_utf8_argument
from runlane.cli.logging import configure_logging
from runlane.cli.output import err, print_json
from runlane.errors import ConfigError, InvalidArgument, NotFound

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    help="runlane: a durable job launcher. One catalog, one run log, every trigger through one door.",
)
catalog_app = typer.Typer(no_args_is_help=True, help="Check the catalog and print its schema.")
db_app = typer.Typer(no_args_is_help=True, help="Database schema: show the version, upgrade.")
chain_app = typer.Typer(no_args_is_help=True, help="Start a chain run; show one as a tree.")
docs_app = typer.Typer(no_args_is_help=True, help="Generate the schedule table and diagrams.")
token_app = typer.Typer(no_args_is_help=True, help="API tokens: create, list, revoke.")
app.add_typer(catalog_app, name="catalog")
app.add_typer(db_app, name="db")
app.add_typer(chain_app, name="chain")
app.add_typer(docs_app, name="docs")
app.add_typer(token_app, name="token")

# Setting up, and the launcher.
app.command()(setup.version)
app.command()(setup.init)
catalog_app.command("check")(setup.catalog_check)
catalog_app.command("schema")(setup.catalog_schema)
db_app.command("upgrade")(setup.db_upgrade)
db_app.command("status")(setup.db_status)
app.command()(setup.config)
app.command()(setup.serve)
app.command()(setup.web)
app.command()(demo.demo)
# Runs.
app.command("run")(runs.run_cmd)
app.command("runs")(runs.runs_cmd)
app.command("show", hidden=True)(runs.show_alias)
app.command("logs")(runs.logs_cmd)
app.command("cancel")(runs.cancel_cmd)
# Jobs, status.
app.command("pause")(jobs.pause_cmd)
app.command("resume")(jobs.resume_cmd)
app.command("jobs")(jobs.jobs_cmd)
app.command("status")(status.status_cmd)
app.command("doctor")(status.doctor_cmd)
# Triggers and docs.
app.command("schedule")(triggers.schedule_cmd)
app.command("emit")(triggers.emit_cmd)
chain_app.command("run")(triggers.chain_run_cmd)
chain_app.command("show")(triggers.chain_show_cmd)
app.command("chains")(triggers.chains_cmd)
app.command("explain")(jobs.explain_cmd)
docs_app.command("generate")(docs.docs_generate_cmd)
# Access to the HTTP API.
token_app.command("create")(access.token_create_cmd)
token_app.command("list")(access.token_list_cmd)
token_app.command("revoke")(access.token_revoke_cmd)
token_app.command("login-link")(access.token_login_link_cmd)
app.command("audit")(access.audit_cmd)
app.command("mcp")(mcp.mcp_cmd)
# Alerts.
alerts_app = typer.Typer(
    invoke_without_command=True, help="Incidents and notifications: list them, test targets."
)
app.add_typer(alerts_app, name="alerts")
alerts_app.callback()(alerts.alerts_cmd)
alerts_app.command("test")(alerts.alerts_test_cmd)


def main() -> None:
    configure_logging()
    argv = sys.argv[1:]
    bad = invalid_utf8_argument(argv)
    if bad is not None:
        if "--json" in argv:
            print_json({"error": InvalidArgument.code, "message": bad})
        err.print(f"[red]error:[/] {output.escape(bad)}")
        raise SystemExit(2)
    # `runlane runs show ID` → the show command (typer has no default subcommand with options).
    prog_name = None
    if len(argv) >= 2 and argv[0] == "runs" and argv[1] == "show":
        sys.argv = [sys.argv[0], "show", *argv[2:]]
        prog_name = "runlane runs"  # usage and help name `runlane runs show`, not the alias
    try:
        app(prog_name=prog_name)
    except ConfigError as exc:  # raised while reading settings, before a command's handler
        err.print(f"[red]error:[/] {output.escape(exc.message)}")
        raise SystemExit(2) from None
    except NotFound as exc:
        err.print(f"[red]error:[/] {output.escape(exc.message)}")
        raise SystemExit(1) from None
