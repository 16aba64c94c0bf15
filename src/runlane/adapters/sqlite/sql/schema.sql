-- runlane reference schema, SQLite. The numbered migrations must produce exactly this
-- (tests/integration/test_migrations.py compares them).
-- Times are TEXT in fixed-width UTC `YYYY-MM-DDTHH:MM:SS.ffffffZ`, so text order is time order.
-- JSON columns are TEXT stored as written; a corrupt value is kept for repair, never dropped.

CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    applied_at TEXT    NOT NULL
);

CREATE TABLE run_log (
    id                  TEXT    PRIMARY KEY,
    job                 TEXT    NOT NULL,
    status              TEXT    NOT NULL
        CHECK (status IN ('queued', 'running', 'success', 'failure', 'timeout', 'skipped', 'cancelled')),
    trigger             TEXT    NOT NULL,
    requested_by        TEXT,
    params              TEXT    NOT NULL DEFAULT '{}',
    dedupe_key          TEXT    NOT NULL UNIQUE,
    parent_run_id       TEXT,
    chain_root_id       TEXT,
    event_id            TEXT,
    downstream          TEXT,
    scheduled_for       TEXT,
    attempt             INTEGER NOT NULL DEFAULT 1,
    retry_of            TEXT,
    max_attempts        INTEGER NOT NULL DEFAULT 1,
    deadline_seconds    REAL    NOT NULL DEFAULT 3600,
    kill_grace_seconds  REAL    NOT NULL DEFAULT 30,
    executor            TEXT    NOT NULL,
    overlap             TEXT    NOT NULL,
    external_id         TEXT,
    not_before          TEXT,
    queue_expires_at    TEXT,
    queued_at           TEXT    NOT NULL,
    started_at          TEXT,
    finished_at         TEXT,
    deadline_at         TEXT,
    exit_code           INTEGER,
    end_reason          TEXT,
    error_code          TEXT,
    note                TEXT,
    log_tail            TEXT,
    traceparent         TEXT,
    cancel_requested_at TEXT,
    lease_owner         TEXT,
    lease_token         TEXT,
    lease_generation    INTEGER NOT NULL DEFAULT 0,
    lease_expires_at    TEXT
);

-- The claim scans due queued runs in claim order; the partial index stays small because final
-- rows drop out of it.
CREATE INDEX run_log_claim_idx ON run_log (coalesce(not_before, queued_at), queued_at, id)
    WHERE status = 'queued';
-- Abandoned-lease recovery and the running counts that admission needs.
CREATE INDEX run_log_running_lease_idx ON run_log (lease_expires_at) WHERE status = 'running';
CREATE INDEX run_log_job_status_idx ON run_log (job, status);
CREATE INDEX run_log_parent_idx ON run_log (parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE INDEX run_log_chain_root_idx ON run_log (chain_root_id) WHERE chain_root_id IS NOT NULL;
CREATE INDEX run_log_queued_at_idx ON run_log (queued_at DESC, id DESC);
CREATE INDEX run_log_queue_expiry_idx ON run_log (queue_expires_at)
    WHERE status = 'queued' AND queue_expires_at IS NOT NULL;
-- (migration 0007) The run list's filters, each in the list's order (keyset pages).
CREATE INDEX run_log_job_queued_idx ON run_log (job, queued_at DESC, id DESC);
CREATE INDEX run_log_status_queued_idx ON run_log (status, queued_at DESC, id DESC);
CREATE INDEX run_log_requested_by_queued_idx ON run_log (requested_by, queued_at DESC, id DESC)
    WHERE requested_by IS NOT NULL;

CREATE TABLE job_overrides (
    job          TEXT PRIMARY KEY,
    paused_until TEXT,
    reason       TEXT,
    created_by   TEXT,
    created_at   TEXT NOT NULL
);

-- The catalog_* columns (migration 0003) say which catalog the launcher runs: the digest of
-- its canonical JSON ("sha256:<hex>"), when the launcher took it, the JSON list of its job names.
-- log_dir (migration 0005): the absolute directory its inline runs write their log files to.
-- bus_queue_depth, bus_dlq_depth (migration 0011): the broker's job_runs and job_runs.dlq.
-- They are written as SQLite's ALTER TABLE ADD COLUMN leaves the stored table text, which the
-- migration test compares with this file.
CREATE TABLE launcher_heartbeat (
    launcher_id TEXT    PRIMARY KEY,
    host        TEXT    NOT NULL,
    pid         INTEGER NOT NULL,
    version     TEXT    NOT NULL,
    started_at  TEXT    NOT NULL,
    beat_at     TEXT,
    queue_depth INTEGER NOT NULL DEFAULT 0,
    running     TEXT    NOT NULL DEFAULT '{}'
, catalog_digest TEXT, catalog_loaded_at TEXT, catalog_jobs TEXT, heartbeat_interval REAL, catalog_path TEXT, catalog_chains TEXT, log_dir TEXT, bus_queue_depth INTEGER, bus_dlq_depth INTEGER);

-- Written by accept when the store feeds a message bus; a relay publishes and stamps rows.
CREATE TABLE outbox (
    id           INTEGER PRIMARY KEY,
    topic        TEXT    NOT NULL,
    payload      TEXT    NOT NULL,
    created_at   TEXT    NOT NULL,
    published_at TEXT
, msg_key TEXT, leased_by TEXT, leased_until TEXT);

CREATE INDEX outbox_unpublished_idx ON outbox (id) WHERE published_at IS NULL;
CREATE INDEX outbox_unpublished_key_idx ON outbox (msg_key, id) WHERE published_at IS NULL;
CREATE INDEX outbox_published_idx ON outbox (published_at) WHERE published_at IS NOT NULL;

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
-- (migration 0013) The chain_overdue rule's read of the overrun chain runs that ended.
CREATE INDEX chain_runs_overrun_idx ON chain_runs (finished_at, id) WHERE overrun_at IS NOT NULL;

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

-- Access control (migration 0006): API tokens, the audit log, idempotency keys.
-- api_tokens: only the SHA-256 (hex) of a secret is stored; prefix is the secret's first
-- characters, shown in lists; jobs is a JSON list of fnmatch globs limiting the token's writes.
-- A name names one token for good (a revoked token keeps its row and its name).
CREATE TABLE api_tokens (
    name         TEXT PRIMARY KEY,
    role         TEXT NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    jobs         TEXT NOT NULL DEFAULT '[]',
    secret_hash  TEXT NOT NULL UNIQUE,
    prefix       TEXT NOT NULL,
    created_by   TEXT,
    created_at   TEXT NOT NULL,
    expires_at   TEXT,
    revoked_at   TEXT,
    last_used_at TEXT
);

-- audit_log: append-only; ids grow with time and page the log (newest first).
CREATE TABLE audit_log (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    at      TEXT NOT NULL,
    actor   TEXT,
    action  TEXT NOT NULL,
    target  TEXT,
    outcome TEXT NOT NULL,
    remote  TEXT,
    detail  TEXT
);

-- idempotency_keys: status NULL while the first request is in flight; body is its response.
-- reservation (migration 0014): the in-flight request's own name for its reservation, which
-- completing or releasing it must give; written as SQLite's ALTER TABLE ADD COLUMN leaves the
-- stored table text.
CREATE TABLE idempotency_keys (
    owner        TEXT NOT NULL,
    key          TEXT NOT NULL,
    fingerprint  TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    status       INTEGER,
    body         TEXT, reservation TEXT,
    PRIMARY KEY (owner, key)
);

CREATE INDEX idempotency_keys_created_idx ON idempotency_keys (created_at);

-- The web UI (migration 0008): server-side sessions and one-time login codes.
-- web_sessions: id is the SHA-256 (hex) of the cookie's 256-bit secret, never the secret. A
-- session belongs to a token: a revoked or expired token ends its sessions at once (the lookup
-- joins api_tokens). expires_at is the absolute end; last_seen_at ends an idle session.
CREATE TABLE web_sessions (
    id           TEXT PRIMARY KEY,
    token_name   TEXT NOT NULL REFERENCES api_tokens (name),
    created_at   TEXT NOT NULL,
    expires_at   TEXT NOT NULL,
    last_seen_at TEXT NOT NULL
);

CREATE INDEX web_sessions_token_idx ON web_sessions (token_name);
CREATE INDEX web_sessions_expires_idx ON web_sessions (expires_at);

-- web_login_codes: the one-time login links `runlane serve` prints (the SHA-256 of the code);
-- used_at is set by the one redemption a code allows.
CREATE TABLE web_login_codes (
    id          TEXT PRIMARY KEY,
    token_name  TEXT NOT NULL REFERENCES api_tokens (name),
    created_at  TEXT NOT NULL,
    expires_at  TEXT NOT NULL,
    used_at     TEXT
);
-- (migration 0009) Alerts: -- incidents: one row per incident; at most one open incident per (rule, fingerprint).
CREATE TABLE incidents (
    id               TEXT    PRIMARY KEY,
    rule             TEXT    NOT NULL,
    fingerprint      TEXT    NOT NULL,
    subject          TEXT    NOT NULL,
    level            TEXT    NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('open', 'resolved')),
    title            TEXT    NOT NULL,
    detail           TEXT,
    run_id           TEXT,
    first_seen       TEXT    NOT NULL,
    last_seen        TEXT    NOT NULL,
    count            INTEGER NOT NULL DEFAULT 1,
    resolved_at      TEXT,
    resolution       TEXT,
    last_notified_at TEXT
);

CREATE UNIQUE INDEX incidents_open_idx ON incidents (rule, fingerprint) WHERE state = 'open';
CREATE INDEX incidents_first_seen_idx ON incidents (first_seen DESC, id DESC);
CREATE INDEX incidents_resolved_idx ON incidents (resolved_at) WHERE state = 'resolved';

-- incident_notices: what each target was last sent about an incident (none, firing, resolved),
-- the retry state of a failing send, and the claim of the launcher sending now.
CREATE TABLE incident_notices (
    incident_id     TEXT    NOT NULL,
    target          TEXT    NOT NULL,
    sent_state      TEXT    NOT NULL DEFAULT 'none'
        CHECK (sent_state IN ('none', 'firing', 'resolved')),
    sent_at         TEXT,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TEXT,
    last_error      TEXT,
    gave_up_at      TEXT,
    claim_owner     TEXT,
    claim_until     TEXT,
    PRIMARY KEY (incident_id, target)
);

-- alert_cursors: how far each rule has read the run log (a finish time).
CREATE TABLE alert_cursors (
    rule       TEXT PRIMARY KEY,
    position   TEXT NOT NULL,
    updated_at TEXT NOT NULL
);

-- alert_targets: each target's last success and its consecutive failures (status, doctor).
-- paused_until (migration 0013): sent nothing until then, by any launcher (a 429's Retry-After);
-- written as SQLite's ALTER TABLE ADD COLUMN leaves the stored table text.
CREATE TABLE alert_targets (
    target        TEXT    PRIMARY KEY,
    last_ok_at    TEXT,
    last_error_at TEXT,
    last_error    TEXT,
    failures      INTEGER NOT NULL DEFAULT 0
, paused_until TEXT);

-- (migration 0012) The run_failed rule reads the failures finished since its cursor, and the
-- last success of a job it has a failure or an open incident for.
CREATE INDEX run_log_alerting_idx ON run_log (finished_at, id)
    WHERE status IN ('failure', 'timeout', 'skipped');
CREATE INDEX run_log_job_success_idx ON run_log (job, finished_at, id) WHERE status = 'success';

-- Facts (docs/bus.md#facts): with the RabbitMQ bus, every run state change writes an outbox
-- row in the transaction that makes it (`run.<job>.<status>` on job_events, a CloudEvent);
-- `bus_config.facts` is set by the launchers of that bus, so the database bus writes none.
CREATE TABLE bus_config (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    facts INTEGER NOT NULL DEFAULT 0
);

CREATE TRIGGER run_log_fact_insert AFTER INSERT ON run_log
WHEN EXISTS (SELECT 1 FROM bus_config WHERE facts = 1)
BEGIN
    INSERT INTO outbox (topic, payload, created_at, msg_key) VALUES (
        'event:run.' || NEW.job || '.' || NEW.status,
        json_object(
            'cloudevent', json_object(
                'specversion', '1.0', 'id', NEW.id || ':' || NEW.status,
                'source', 'runlane://run-log', 'type', 'runlane.run.' || NEW.status,
                'subject', NEW.id, 'time', strftime('%Y-%m-%dT%H:%M:%f000Z', 'now'),
                'datacontenttype', 'application/json'),
            'data', json_object(
                'run_id', NEW.id, 'job', NEW.job, 'status', NEW.status,
                'trigger', NEW.trigger, 'attempt', NEW.attempt,
                'exit_code', NEW.exit_code, 'end_reason', NEW.end_reason)),
        strftime('%Y-%m-%dT%H:%M:%f000Z', 'now'),
        NEW.id);
END;

CREATE TRIGGER run_log_fact_update AFTER UPDATE OF status ON run_log
WHEN OLD.status IS NOT NEW.status AND EXISTS (SELECT 1 FROM bus_config WHERE facts = 1)
BEGIN
    INSERT INTO outbox (topic, payload, created_at, msg_key) VALUES (
        'event:run.' || NEW.job || '.' || NEW.status,
        json_object(
            'cloudevent', json_object(
                'specversion', '1.0', 'id', NEW.id || ':' || NEW.status,
                'source', 'runlane://run-log', 'type', 'runlane.run.' || NEW.status,
                'subject', NEW.id, 'time', strftime('%Y-%m-%dT%H:%M:%f000Z', 'now'),
                'datacontenttype', 'application/json'),
            'data', json_object(
                'run_id', NEW.id, 'job', NEW.job, 'status', NEW.status,
                'trigger', NEW.trigger, 'attempt', NEW.attempt,
                'exit_code', NEW.exit_code, 'end_reason', NEW.end_reason)),
        strftime('%Y-%m-%dT%H:%M:%f000Z', 'now'),
        NEW.id);
END;
