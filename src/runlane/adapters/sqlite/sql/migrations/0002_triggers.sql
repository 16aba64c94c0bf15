-- Triggers: the scheduler's last planned slot per schedule, chain runs, events and the runs they
-- started or joined.
CREATE TABLE schedule_state (
    schedule_key TEXT PRIMARY KEY,
    last_slot    TEXT NOT NULL,
    updated_at   TEXT NOT NULL
);

CREATE TABLE chain_runs (
    id            TEXT PRIMARY KEY,
    chain         TEXT NOT NULL,
    dedupe_key    TEXT NOT NULL UNIQUE,
    trigger       TEXT NOT NULL,
    requested_by  TEXT,
    scheduled_for TEXT,
    status        TEXT NOT NULL
        CHECK (status IN ('running', 'success', 'failure', 'skipped')),
    end_reason    TEXT,
    started_at    TEXT NOT NULL,
    deadline_at   TEXT,
    finished_at   TEXT,
    overrun_at    TEXT
);

CREATE INDEX chain_runs_active_idx ON chain_runs (started_at, id) WHERE status = 'running';
CREATE INDEX chain_runs_chain_idx ON chain_runs (chain, started_at DESC);

CREATE TABLE events (
    id          TEXT PRIMARY KEY,
    key         TEXT NOT NULL,
    data        TEXT NOT NULL DEFAULT '{}',
    occurred_at TEXT NOT NULL
);

CREATE INDEX events_key_idx ON events (key, occurred_at DESC);

CREATE TABLE event_runs (
    event_id TEXT    NOT NULL,
    run_id   TEXT    NOT NULL,
    job      TEXT    NOT NULL,
    started  INTEGER NOT NULL,
    PRIMARY KEY (event_id, run_id)
);

CREATE INDEX event_runs_run_idx ON event_runs (run_id);
