"""The chains pages: `/chains` (every chain with its steps and recent runs, and Run, with the
`acts` confirmation of the job page) and `/chain-runs/{id}` (the chain run as an SVG graph
laid out by `web.graph`, each step linked to its run, and a table of the same steps).

Run calls `operations.run_chain` inside `operations.audited`; a chain with an `acts: true`
step asks the person to type the chain's name (`confirm=`), checked by the operation.
"""

from __future__ import annotations

import urllib.parse

from fastapi import APIRouter, Request, Response

from runlane.errors import ConfirmationRequired, Forbidden, RunlaneError
from runlane.service import operations
from runlane.service.operations import Requester
from runlane.service.runtime import Runtime
from runlane.web.graph import GraphStep, layout
from runlane.web.render import page
from runlane.web.session import (
    PageRoute,
    WebOperator,
    WebRuntime,
    WebViewer,
    redirect,
    remote_of,
)

router = APIRouter(route_class=PageRoute, include_in_schema=False)

RECENT_CHAIN_RUNS = 20
# The statuses a step box can have; anything else is drawn as `other` (its text still says).
STEP_STATUSES = frozenset(
    {"pending", "queued", "running", "success", "failure", "timeout", "skipped", "cancelled"}
)


async def _may_run_chain(rt: Runtime, chain: str, who: Requester) -> bool:
    try:
        await operations.authorize_run_chain(rt, chain, requester=who)
    except Forbidden:
        return False
    return True


async def _chains_page(
    request: Request,
    rt: Runtime,
    who: Requester,
    *,
    status: int = 200,
    error: RunlaneError | None = None,
    confirming: str | None = None,
) -> Response:
    chains = await operations.list_chains(rt)
    runnable = {c.name for c in chains if await _may_run_chain(rt, c.name, who)}
    recent = await operations.list_chain_runs(rt, limit=RECENT_CHAIN_RUNS)
    return page(
        request,
        "chains.html",
        status=status,
        nav="chains",
        chains=chains,
        runnable=runnable,
        recent=recent,
        error=error,
        confirming=confirming,
    )


@router.get("/chains")
async def chains_page(request: Request, rt: WebRuntime, who: WebViewer) -> Response:
    """Every chain of the catalog with its steps, Run, and the latest chain runs."""
    return await _chains_page(request, rt, who)


@router.post("/chains/{chain}/run")
async def run_chain(request: Request, rt: WebRuntime, who: WebOperator, chain: str) -> Response:
    """Start a run of the chain now; a chain with an `acts` step first asks for its typed
    name. 303 to the chain run's page."""
    form = await request.form()
    confirm = form.get("confirm")
    typed = confirm if isinstance(confirm, str) else None
    try:
        started = await operations.audited(
            rt,
            who,
            action="run_chain",
            target=chain,
            remote=remote_of(request),
            call=lambda: operations.run_chain(rt, chain, requester=who, confirm=typed),
        )
    except ConfirmationRequired as exc:
        return await _chains_page(
            request,
            rt,
            who,
            status=200 if typed is None else exc.http_status,
            error=None if typed is None else exc,
            confirming=chain,
        )
    except RunlaneError as exc:
        if isinstance(exc, Forbidden):
            raise
        return await _chains_page(request, rt, who, status=exc.http_status, error=exc)
    run_id = started.view.run.id
    return redirect(
        request, f"/chain-runs/{run_id}", flash=f"Chain run {run_id[:8]} of {chain} started"
    )


@router.get("/chain-runs/{chain_run_id}")
async def chain_run_page(
    request: Request, rt: WebRuntime, _who: WebViewer, chain_run_id: str
) -> Response:
    """A chain run: its steps as a graph (boxes coloured and labelled by status, `on:
    success` edges solid and `on: finish` dashed) and as a table, each linked to its run."""
    view = await operations.show_chain_run(rt, chain_run_id)
    steps = [
        GraphStep(s.step, s.after, status=s.status, job=s.job, run_id=s.run_id) for s in view.steps
    ]
    graph = layout(steps)
    return page(
        request,
        "chain_run.html",
        nav="chains",
        view=view,
        graph=graph,
        step_class=lambda status: status if status in STEP_STATUSES else "other",
        chain_path="/chains#chain-" + urllib.parse.quote(view.run.chain),
    )
