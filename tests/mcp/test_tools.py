"""Every MCP tool through the SDK's in-process client, on SQLite and PostgreSQL: its listing
(schema, annotations), its success (the API's JSON shape as structured content) and each of its
refusals (a tool error with the code and a sentence); roles, job scopes, `acts` confirmation
(explicit and elicited), and the audit of every write."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runlane.core.runs import EndReason, Outcome, RunStatus
from runlane.service import operations
from runlane.service.runtime import Runtime
from tests.mcp.conftest import CLI, Connect, refusal, structured

READS = {
    "list_jobs",
    "describe_job",
    "list_runs",
    "get_run",
    "get_run_logs",
    "get_chain_run",
    "explain",
}
DESTRUCTIVE = {"run_job", "run_chain", "cancel_run", "pause_job", "emit_event"}
WRITES = DESTRUCTIVE | {"resume_job"}


async def test_tools_are_listed_with_schemas_and_annotations(connect: Connect) -> None:
    async with connect() as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == READS | WRITES
    for name in READS:
        assert tools[name].annotations is not None
        assert tools[name].annotations.read_only_hint is True, name
        assert tools[name].annotations.destructive_hint is False, name
    for name in DESTRUCTIVE:
        assert tools[name].annotations is not None
        assert tools[name].annotations.read_only_hint is False, name
        assert tools[name].annotations.destructive_hint is True, name
    run_job = tools["run_job"].input_schema
    assert set(run_job["properties"]) == {"job", "params", "confirm"}  # not the resolver's
    assert run_job["required"] == ["job"]
    assert set(tools["pause_job"].input_schema["properties"]) == {"job", "until", "reason"}
    assert set(tools["emit_event"].input_schema["properties"]) == {"key", "data", "id", "confirm"}
    assert set(tools["explain"].input_schema["properties"]) == {"job", "at"}
    limit = tools["list_runs"].input_schema["properties"]["limit"]
    assert (limit["minimum"], limit["maximum"], limit["default"]) == (1, 100, 20)
    statuses = tools["list_runs"].input_schema["$defs"]["RunStatus"]["enum"]
    assert {"queued", "running", "success"} <= set(statuses)
    assert all(t.description for t in tools.values())


async def test_list_and_describe_jobs(connect: Connect, rt: Runtime) -> None:
    async with connect("viewer") as client:
        listed = structured(await client.call_tool("list_jobs", {}))
        names = [j["job"] for j in listed["items"]]
        assert names == sorted(names)
        assert {"hello", "careful", "typed"} <= set(names)
        careful = next(j for j in listed["items"] if j["job"] == "careful")
        assert careful["acts"] is True
        await operations.run_job(rt, "hello", requester=CLI)
        job = structured(await client.call_tool("describe_job", {"job": "hello"}))
        typed = structured(await client.call_tool("describe_job", {"job": "typed"}))
        missing = refusal(await client.call_tool("describe_job", {"job": "nope"}))
    assert job["job"] == "hello"
    assert job["description"] == "says hello"
    zones = [s["timezone"] for s in job["schedule_slots"]]
    assert zones == ["Europe/Berlin", "America/New_York"]
    slot = job["schedule_slots"][1]["next_slots"][0]
    assert slot["utc"].endswith("Z")
    assert slot["local"].endswith(("-05:00", "-04:00"))
    assert job["last_run"]["job"] == "hello"
    assert [r["job"] for r in job["last_runs"]] == ["hello"]
    assert not {"params", "note", "log_tail"} & set(job["last_runs"][0])  # list_runs' view
    assert job["last_runs"][0]["queued_at"].endswith("Z")
    assert job["paused"] is False
    schema = typed["params_schema"]
    assert schema["properties"]["count"]["type"] == "integer"
    assert schema["required"] == ["count"]
    assert missing[0] == "unknown_job"
    assert "nope" in missing[1]


async def test_run_job_queues_a_run_as_the_token_with_trigger_mcp(
    connect: Connect, rt: Runtime
) -> None:
    async with connect("operator") as client:
        result = await client.call_tool("run_job", {"job": "typed", "params": {"count": 3}})
    run = structured(result)
    assert run["job"] == "typed"
    assert run["status"] == "queued"
    assert run["trigger"] == "mcp"
    assert run["requested_by"] == "operator"
    assert run["params"] == {"count": 3}
    assert "lease_token" not in run
    stored = await operations.show_run(rt, run["id"])
    assert stored.trigger == "mcp"
    texts = [getattr(c, "text", "") for c in result.content]
    assert any("no launcher" in t for t in texts)  # the notices come along
    audit = (await operations.list_audit(rt, limit=5)).items
    assert (audit[0].actor, audit[0].action, audit[0].target, audit[0].outcome) == (
        "operator",
        "run_job",
        "typed",
        "ok",
    )
    assert audit[0].remote == "in-process"


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({"job": "nope"}, "unknown_job"),
        ({"job": "typed", "params": {"count": "many"}}, "param_invalid"),
        ({"job": "typed", "params": {}}, "param_invalid"),
        ({"job": "typed", "params": {"count": 1, "extra": 2}}, "param_invalid"),
        ({"job": "typed", "params": "not an object"}, "invalid_argument"),
        ({}, "invalid_argument"),
    ],
)
async def test_run_job_refusals(
    connect: Connect, rt: Runtime, arguments: dict[str, Any], code: str
) -> None:
    async with connect("operator") as client:
        got, message = refusal(await client.call_tool("run_job", arguments))
    assert got == code
    assert message
    assert await operations.list_runs(rt) == ()


async def test_run_job_overlap_names_the_active_run(connect: Connect) -> None:
    async with connect("operator") as client:
        first = structured(await client.call_tool("run_job", {"job": "single"}))
        second = await client.call_tool("run_job", {"job": "single"})
    code, message = refusal(second)
    assert code == "overlap_refused"
    assert second.structured_content is not None
    assert second.structured_content["active_run_id"] == first["id"]
    assert first["id"] in message


async def test_a_viewer_is_refused_every_write_and_nothing_is_written(
    connect: Connect, rt: Runtime
) -> None:
    queued = await operations.run_job(rt, "hello", requester=CLI)
    calls = {
        "run_job": {"job": "hello"},
        "run_chain": {"chain": "pair"},
        "cancel_run": {"run_id": queued.run.id},
        "pause_job": {"job": "hello"},
        "resume_job": {"job": "hello"},
        "emit_event": {"key": "greet"},
    }
    async with connect("viewer") as client:
        for tool, arguments in calls.items():
            code, message = refusal(await client.call_tool(tool, arguments))
            assert code == "forbidden", tool
            assert "operator role" in message, message
            assert "'viewer'" in message, message
        reads = structured(await client.call_tool("list_runs", {}))
    assert [r["id"] for r in reads["items"]] == [queued.run.id]
    assert (await operations.show_run(rt, queued.run.id)).status is RunStatus.QUEUED
    assert all(not j.pause for j in await operations.list_jobs(rt))
    outcomes = {(e.action, e.outcome) for e in (await operations.list_audit(rt)).items}
    assert ("run_job", "forbidden") in outcomes  # refusals are audited too
    assert ("cancel", "forbidden") in outcomes


async def test_no_token_reads_but_every_write_says_to_set_runlane_token(
    connect: Connect, rt: Runtime
) -> None:
    async with connect(None) as client:
        jobs = structured(await client.call_tool("list_jobs", {}))
        for tool, arguments in {
            "run_job": {"job": "hello"},
            "cancel_run": {"run_id": "abcdef"},
            "pause_job": {"job": "hello"},
            "resume_job": {"job": "hello"},
            "emit_event": {"key": "greet"},
            "run_chain": {"chain": "pair"},
        }.items():
            code, message = refusal(await client.call_tool(tool, arguments))
            assert code == "unauthenticated", tool
            assert "RUNLANE_TOKEN" in message
    assert jobs["items"]
    assert await operations.list_runs(rt) == ()


async def test_a_job_scoped_token_writes_only_its_jobs(connect: Connect, rt: Runtime) -> None:
    other = await operations.run_job(rt, "hello", requester=CLI)
    async with connect("etl") as client:
        mine = structured(await client.call_tool("run_job", {"job": "etl.load"}))
        refused_run = refusal(await client.call_tool("run_job", {"job": "hello"}))
        refused_cancel = refusal(await client.call_tool("cancel_run", {"run_id": other.run.id}))
        refused_pause = refusal(await client.call_tool("pause_job", {"job": "hello"}))
        refused_chain = refusal(await client.call_tool("run_chain", {"chain": "pair"}))
        cancelled = structured(await client.call_tool("cancel_run", {"run_id": mine["id"]}))
    assert mine["requested_by"] == "etl"
    for code, message in (refused_run, refused_cancel, refused_pause, refused_chain):
        assert code == "forbidden"
        assert "etl.*" in message
    assert cancelled["status"] == "cancelled"
    assert (await operations.show_run(rt, other.run.id)).status is RunStatus.QUEUED


async def test_an_acts_job_is_refused_without_confirmation_and_says_what_would_run(
    connect: Connect, rt: Runtime
) -> None:
    async with connect("operator") as client:
        result = await client.call_tool("run_job", {"job": "careful"})
        wrong = await client.call_tool("run_job", {"job": "careful", "confirm": "yes"})
    code, message = refusal(result)
    assert code == "confirmation_required"
    assert "confirm: 'careful'" in message
    assert result.structured_content is not None
    would = result.structured_content["would_run"]
    assert would["job"] == "careful"
    assert "print('acted')" in would["command"]
    assert refusal(wrong)[0] == "confirmation_required"
    assert await operations.list_runs(rt) == ()


async def test_an_acts_job_runs_with_confirm(connect: Connect) -> None:
    async with connect("operator") as client:
        run = structured(
            await client.call_tool("run_job", {"job": "careful", "confirm": "careful"})
        )
    assert (run["job"], run["trigger"]) == ("careful", "mcp")


async def test_a_client_that_supports_elicitation_is_asked(connect: Connect, rt: Runtime) -> None:
    async with connect("operator", answer={"confirm": True}) as client:
        run = structured(await client.call_tool("run_job", {"job": "careful"}))
    assert run["job"] == "careful"
    async with connect("operator", answer={"confirm": False}) as client:
        said_no = refusal(await client.call_tool("run_job", {"job": "careful"}))
    async with connect("operator", answer="decline") as client:
        declined = refusal(await client.call_tool("run_job", {"job": "careful"}))
        chain = refusal(await client.call_tool("run_chain", {"chain": "risky"}))
        event = refusal(await client.call_tool("emit_event", {"key": "poke"}))
    for code, message in (said_no, declined, chain, event):
        assert code == "confirmation_required"
        assert "did not confirm" in message
    assert [r.id for r in await operations.list_runs(rt)] == [run["id"]]


async def test_a_viewer_is_not_asked_to_confirm(connect: Connect) -> None:
    asked: list[str] = []
    async with connect("viewer", answer={"confirm": True}, asked=asked) as client:
        results = [
            await client.call_tool("run_job", {"job": "careful"}),
            await client.call_tool("run_chain", {"chain": "risky"}),
            await client.call_tool("emit_event", {"key": "poke"}),
        ]
    assert [refusal(r)[0] for r in results] == ["forbidden"] * 3
    assert asked == []
    async with connect("operator", answer={"confirm": True}, asked=asked) as client:
        structured(await client.call_tool("run_job", {"job": "careful"}))
    assert len(asked) == 1
    assert "careful" in asked[0]
    assert "acts on the outside world" in asked[0]


async def test_list_runs_filters_pages_and_bounds(connect: Connect, rt: Runtime) -> None:
    for _ in range(3):
        await operations.run_job(rt, "hello", requester=CLI)
    await operations.run_job(rt, "etl.load", requester=CLI)
    async with connect("viewer") as client:
        hello = structured(await client.call_tool("list_runs", {"job": "hello"}))
        first = structured(await client.call_tool("list_runs", {"limit": 3}))
        rest = structured(
            await client.call_tool("list_runs", {"limit": 3, "cursor": first["next_cursor"]})
        )
        cli = structured(await client.call_tool("list_runs", {"trigger": "cli"}))
        none = structured(await client.call_tool("list_runs", {"status": "running"}))
        too_many = refusal(await client.call_tool("list_runs", {"limit": 101}))
        bad_status = refusal(await client.call_tool("list_runs", {"status": "lost"}))
        bad_cursor = refusal(await client.call_tool("list_runs", {"cursor": "garbage"}))
        bad_since = refusal(await client.call_tool("list_runs", {"since": "yesterday-ish"}))
        whole = structured(await client.call_tool("get_run", {"run_id": hello["items"][0]["id"]}))
    assert [r["job"] for r in hello["items"]] == ["hello"] * 3
    # A list leaves out what has no small bound (a saved log tail is up to 64 KiB a run);
    # get_run has it. Times are ISO text, as get_run writes them.
    assert {"params", "note", "log_tail"} <= set(whole)
    assert hello["items"][0] == {
        k: v for k, v in whole.items() if k not in ("params", "note", "log_tail")
    }
    assert len(first["items"]) == 3
    assert first["next_cursor"]
    assert len(rest["items"]) == 1
    assert rest["next_cursor"] is None
    ids = [r["id"] for r in first["items"] + rest["items"]]
    assert len(set(ids)) == 4
    assert len(cli["items"]) == 4
    assert none["items"] == []
    for code, _ in (too_many, bad_status, bad_cursor, bad_since):
        assert code == "invalid_argument"
    assert "100" in too_many[1]


async def test_get_run(connect: Connect, rt: Runtime) -> None:
    queued = await operations.run_job(rt, "hello", requester=CLI)
    async with connect("viewer") as client:
        whole = structured(await client.call_tool("get_run", {"run_id": queued.run.id}))
        prefix = structured(await client.call_tool("get_run", {"run_id": queued.run.id[:8]}))
        missing = refusal(
            await client.call_tool("get_run", {"run_id": "00000000-0000-0000-0000-000000000000"})
        )
        short = refusal(await client.call_tool("get_run", {"run_id": "abc"}))
    assert whole == prefix
    assert whole["id"] == queued.run.id
    assert whole["status"] == "queued"
    assert missing[0] == "unknown_run"
    assert short[0] == "invalid_argument"


async def test_text_the_database_cannot_compare_is_invalid_argument_as_on_the_api(
    connect: Connect, rt: Runtime
) -> None:
    # The API answers U+0000 in a run id or a run-list filter with 422 invalid_argument
    # (docs/api.md); a tool gets the same code, on either database (it was unknown_run, or on
    # SQLite an empty page for a filter, and a run id's cancel went on to the chain runs).
    queued = await operations.run_job(rt, "hello", requester=CLI)
    async with connect("operator") as client:
        answers = [
            refusal(await client.call_tool(tool, args))
            for tool, args in (
                ("get_run", {"run_id": queued.run.id[:8] + "\x00"}),
                ("get_run_logs", {"run_id": queued.run.id[:8] + "\x00"}),
                ("cancel_run", {"run_id": queued.run.id[:8] + "\x00"}),
                ("get_chain_run", {"chain_run_id": "abcdef\x00"}),
                ("list_runs", {"job": "hello\x00"}),
                ("list_runs", {"requested_by": "a\x00"}),
                ("list_runs", {"chain_root_id": "a\x00"}),
            )
        ]
    assert [code for code, _ in answers] == ["invalid_argument"] * len(answers)
    assert all("U+0000" in message for _, message in answers)
    assert (await operations.show_run(rt, queued.run.id)).status is RunStatus.QUEUED


async def test_cancel_run(connect: Connect, rt: Runtime) -> None:
    queued = await operations.run_job(rt, "hello", requester=CLI)
    async with connect("operator") as client:
        cancelled = structured(await client.call_tool("cancel_run", {"run_id": queued.run.id}))
        again = refusal(await client.call_tool("cancel_run", {"run_id": queued.run.id}))
        missing = refusal(
            await client.call_tool("cancel_run", {"run_id": "00000000-0000-0000-0000-000000000000"})
        )
    assert cancelled["status"] == "cancelled"
    assert again[0] == "not_cancellable"
    assert missing[0] == "unknown_run"
    audit = (await operations.list_audit(rt, limit=5)).items
    assert [(e.action, e.outcome) for e in audit[:3]] == [
        ("cancel", "unknown_run"),
        ("cancel", "not_cancellable"),
        ("cancel", "ok"),
    ]


async def test_pause_and_resume(connect: Connect, rt: Runtime) -> None:
    async with connect("operator") as client:
        paused = structured(
            await client.call_tool(
                "pause_job", {"job": "hello", "until": "2h", "reason": "maintenance"}
            )
        )
        described = structured(await client.call_tool("describe_job", {"job": "hello"}))
        resumed = structured(await client.call_tool("resume_job", {"job": "hello"}))
        again = structured(await client.call_tool("resume_job", {"job": "hello"}))
        past = refusal(await client.call_tool("pause_job", {"job": "hello", "until": "2000-01-01"}))
        long_reason = refusal(
            await client.call_tool("pause_job", {"job": "hello", "reason": "x" * 501})
        )
        unknown = refusal(await client.call_tool("pause_job", {"job": "nope"}))
        unknown_resume = refusal(await client.call_tool("resume_job", {"job": "nope"}))
    assert paused["paused"] is True
    assert paused["pause_reason"] == "maintenance"
    assert paused["paused_by"] == "operator"
    assert paused["paused_until"].endswith("Z")
    assert described["paused"] is True
    assert described["paused_until"] == paused["paused_until"]
    assert resumed == {"job": "hello", "was_paused": True}
    assert again == {"job": "hello", "was_paused": False}
    assert past[0] == "invalid_argument"
    assert "past" in past[1]
    assert long_reason[0] == "invalid_argument"
    assert unknown[0] == "unknown_job"
    assert unknown_resume[0] == "unknown_job"
    assert all(not j.pause for j in await operations.list_jobs(rt))


async def test_emit_event(connect: Connect, rt: Runtime) -> None:
    async with connect("operator") as client:
        emitted = structured(
            await client.call_tool("emit_event", {"key": "greet", "data": {"n": 1}, "id": "e-1"})
        )
        replay = structured(await client.call_tool("emit_event", {"key": "greet", "id": "e-1"}))
        acting = refusal(await client.call_tool("emit_event", {"key": "poke"}))
        confirmed = structured(
            await client.call_tool("emit_event", {"key": "poke", "confirm": True})
        )
        bad = refusal(await client.call_tool("emit_event", {"key": "bad key!"}))
    assert emitted["event"]["key"] == "greet"
    assert emitted["event"]["new"] is True
    assert [r["job"] for r in emitted["runs"]] == ["hello"]
    assert replay["event"]["new"] is False
    assert acting[0] == "confirmation_required"
    assert "confirm: true" in acting[1]
    assert [r["job"] for r in confirmed["runs"]] == ["careful"]
    assert bad[0] == "bad_event"
    jobs = sorted(r.job for r in await operations.list_runs(rt))
    assert jobs == ["careful", "hello"]


async def test_run_chain_and_get_chain_run(connect: Connect, rt: Runtime) -> None:
    async with connect("operator") as client:
        started = structured(await client.call_tool("run_chain", {"chain": "pair"}))
        shown = structured(
            await client.call_tool("get_chain_run", {"chain_run_id": started["id"][:8]})
        )
        unknown = refusal(await client.call_tool("run_chain", {"chain": "nope"}))
        risky = refusal(await client.call_tool("run_chain", {"chain": "risky"}))
        confirmed = structured(
            await client.call_tool("run_chain", {"chain": "risky", "confirm": "risky"})
        )
        missing = refusal(
            await client.call_tool(
                "get_chain_run", {"chain_run_id": "00000000-0000-0000-0000-000000000000"}
            )
        )
        cancelled = structured(await client.call_tool("cancel_run", {"run_id": started["id"]}))
    assert started["chain"] == "pair"
    assert started["trigger"] == "mcp"
    assert started["requested_by"] == "operator"
    assert [s["step"] for s in shown["steps"]] == ["first", "second"]
    assert shown["id"] == started["id"]
    assert unknown[0] == "unknown_chain"
    assert risky[0] == "confirmation_required"
    assert "careful" in risky[1]
    assert confirmed["chain"] == "risky"
    assert missing[0] == "unknown_chain_run"
    assert cancelled["id"] == started["id"]
    assert cancelled["finished_at"] is not None
    assert "cancel" in str(cancelled["end_reason"]) + cancelled["status"]


async def test_explain(connect: Connect) -> None:
    async with connect("viewer") as client:
        found = structured(
            await client.call_tool("explain", {"job": "hello", "at": "2026-06-01T09:15Z"})
        )
        unknown = refusal(await client.call_tool("explain", {"job": "nope"}))
        bad_time = refusal(await client.call_tool("explain", {"job": "hello", "at": "soon"}))
    assert found["job"] == "hello"
    assert found["slot"] == "2026-06-01T09:00:00Z"
    assert found["verdict"]
    assert found["lines"]
    assert unknown[0] == "unknown_job"
    assert bad_time[0] == "invalid_argument"


async def test_an_unknown_tool_is_a_coded_error(connect: Connect) -> None:
    async with connect() as client:
        code, message = refusal(await client.call_tool("drop_database", {}))
    assert code == "invalid_argument"
    assert "drop_database" in message


def write_log(path: Path, body: str) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    return path.stat().st_size


async def test_a_10_mb_log_comes_back_as_a_bounded_tail(connect: Connect, rt: Runtime) -> None:
    queued = await operations.run_job(rt, "hello", requester=CLI)
    line = "x" * 99 + "\n"  # 100 bytes a line
    body = "".join(f"{n:08d}{line[8:]}" for n in range(100_000))  # 10 MB
    # Where the inline executor writes the run's log (`Runtime.find_log`).
    size = write_log(Path(rt.settings.log_dir) / f"{queued.run.id}.1.log", body)
    assert size == 10_000_000
    async with connect("viewer") as client:
        default = await client.call_tool("get_run_logs", {"run_id": queued.run.id})
        few = structured(
            await client.call_tool("get_run_logs", {"run_id": queued.run.id, "lines": 3})
        )
        small = structured(
            await client.call_tool(
                "get_run_logs", {"run_id": queued.run.id, "lines": 2000, "max_bytes": 1000}
            )
        )
        too_many = refusal(
            await client.call_tool("get_run_logs", {"run_id": queued.run.id, "lines": 2001})
        )
        too_big = refusal(
            await client.call_tool("get_run_logs", {"run_id": queued.run.id, "max_bytes": 65537})
        )
        unknown = refusal(
            await client.call_tool(
                "get_run_logs", {"run_id": "00000000-0000-0000-0000-000000000000"}
            )
        )
    tail = structured(default)
    assert tail["text"].splitlines()[-1].startswith("00099999")
    assert len(tail["text"].encode()) <= 16 * 1024
    assert tail["end_offset"] == size
    assert tail["cut_bytes"] == tail["start_offset"] == size - len(tail["text"].encode())
    assert sum(len(getattr(c, "text", "")) for c in default.content) < 64 * 1024
    assert few["text"].splitlines() == [f"{n:08d}{line[8:-1]}" for n in (99997, 99998, 99999)]
    assert few["cut_bytes"] == size - 300
    assert len(small["text"]) <= 1000
    assert small["text"].endswith("\n")
    assert small["text"].startswith("000999")  # whole lines only
    assert too_many[0] == "invalid_argument"
    assert too_big[0] == "invalid_argument"
    assert unknown[0] == "unknown_run"


async def test_a_saved_tail_is_bounded_in_bytes_and_lines(connect: Connect, rt: Runtime) -> None:
    # The log file could not be written whole (a full disk): the tail saved with the run
    # follows it. It was cut by characters (up to four bytes each) and not by lines:
    # `max_bytes` 1000 gave ~4,000 bytes.
    queued = await operations.run_job(rt, "hello", requester=CLI)
    saved = "".join(f"line {n} " + "€" * 30 + "\n" for n in range(500))  # ~97 bytes a line
    note = (
        f"the log file /var/log/runlane/{queued.run.id}.1.log is incomplete: writing it failed "
        "(No space left on device); the tail here is complete"
    )
    await rt.store.finish_unleased(
        queued.run.id,
        RunStatus.QUEUED,
        Outcome(RunStatus.CANCELLED, EndReason.CANCELLED, log_tail=saved, note=note),
    )
    async with connect("viewer") as client:
        result = structured(
            await client.call_tool(
                "get_run_logs", {"run_id": queued.run.id, "lines": 3, "max_bytes": 1000}
            )
        )
        small = structured(
            await client.call_tool(
                "get_run_logs", {"run_id": queued.run.id, "lines": 2000, "max_bytes": 1000}
            )
        )
    assert result["saved_tail"].splitlines() == saved.splitlines()[-3:]
    assert len(small["saved_tail"].encode()) <= 1000
    assert saved.endswith(small["saved_tail"])
    assert small["saved_tail"].startswith("line ")  # whole lines only


async def test_a_run_without_output_says_so(connect: Connect, rt: Runtime) -> None:
    queued = await operations.run_job(rt, "hello", requester=CLI)
    async with connect("viewer") as client:
        result = await client.call_tool("get_run_logs", {"run_id": queued.run.id})
    tail = structured(result)
    assert tail["text"] == ""
    assert tail["cut_bytes"] == 0
    assert tail["notice"]
    assert "no output" in tail["notice"]


async def test_a_job_name_no_catalog_has_is_unknown_job_however_long(
    connect: Connect, rt: Runtime
) -> None:
    """As the API and the CLI answer it: the catalog decides, not a cap of the tool's own."""
    name = "x" * 201
    async with connect("operator") as client:
        codes = [
            refusal(await client.call_tool(tool, {"job": name}))[0]
            for tool in ("describe_job", "run_job", "pause_job", "resume_job", "explain")
        ]
    assert codes == ["unknown_job"] * 5
