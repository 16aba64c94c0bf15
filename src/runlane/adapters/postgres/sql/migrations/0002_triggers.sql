-- Triggers: the scheduler's last planned slot per schedule, chain runs, events and the runs they
-- started or joined.
CREATE TABLE schedule_state (
    schedule_key text        PRIMARY KEY,
    last_slot    timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL
);

CREATE TABLE chain_runs (
    id            uuid        PRIMARY KEY,
    chain         text        NOT NULL,
    dedupe_key    text        NOT NULL UNIQUE,
    trigger       text        NOT NULL,
    requested_by  text,
    scheduled_for timestamptz,
    status        text        NOT NULL
        CHECK (status IN ('running', 'success', 'failure', 'skipped')),
    end_reason    text,
    started_at    timestamptz NOT NULL,
    deadline_at   timestamptz,
    finished_at   timestamptz,
    overrun_at    timestamptz
);

CREATE INDEX chain_runs_active_idx ON chain_runs (started_at, id) WHERE status = 'running';
CREATE INDEX chain_runs_chain_idx ON chain_runs (chain, started_at DESC);

CREATE TABLE events (
    id          text        PRIMARY KEY,
    key         text        NOT NULL,
    data        jsonb       NOT NULL DEFAULT '{}',
    occurred_at timestamptz NOT NULL
);

CREATE INDEX events_key_idx ON events (key, occurred_at DESC);

-- started: this event started the run; false: it joined a run of its debounce window.
CREATE TABLE event_runs (
    event_id text    NOT NULL,
    run_id   uuid    NOT NULL,
    job      text    NOT NULL,
    started  boolean NOT NULL,
    PRIMARY KEY (event_id, run_id)
);

CREATE INDEX event_runs_run_idx ON event_runs (run_id);
