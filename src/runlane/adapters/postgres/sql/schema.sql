-- runlane reference schema, PostgreSQL. The numbered migrations must produce exactly this
-- (tests/integration/test_migrations.py compares them).

CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer     PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE run_log (
    id                  uuid             PRIMARY KEY,
    job                 text             NOT NULL,
    status              text             NOT NULL
        CHECK (status IN ('queued', 'running', 'success', 'failure', 'timeout', 'skipped', 'cancelled')),
    trigger             text             NOT NULL,
    requested_by        text,
    params              jsonb            NOT NULL DEFAULT '{}',
    dedupe_key          text             NOT NULL UNIQUE,
    parent_run_id       uuid,
    chain_root_id       uuid,
    event_id            text,
    downstream          jsonb,
    scheduled_for       timestamptz,
    attempt             integer          NOT NULL DEFAULT 1,
    retry_of            uuid,
    max_attempts        integer          NOT NULL DEFAULT 1,
    deadline_seconds    double precision NOT NULL DEFAULT 3600,
    kill_grace_seconds  double precision NOT NULL DEFAULT 30,
    executor            text             NOT NULL,
    overlap             text             NOT NULL,
    external_id         text,
    not_before          timestamptz,
    queue_expires_at    timestamptz,
    queued_at           timestamptz      NOT NULL,
    started_at          timestamptz,
    finished_at         timestamptz,
    deadline_at         timestamptz,
    exit_code           integer,
    end_reason          text,
    error_code          text,
    note                text,
    log_tail            text,
    traceparent         text,
    cancel_requested_at timestamptz,
    lease_owner         text,
    lease_token         uuid,
    lease_generation    bigint           NOT NULL DEFAULT 0,
    lease_expires_at    timestamptz
);

-- The claim scans due queued runs in claim order; the partial index stays small because final
-- rows drop out of it.
CREATE INDEX run_log_claim_idx ON run_log ((coalesce(not_before, queued_at)), queued_at, id)
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
    job          text        PRIMARY KEY,
    paused_until timestamptz,
    reason       text,
    created_by   text,
    created_at   timestamptz NOT NULL
);

CREATE TABLE launcher_heartbeat (
    launcher_id text        PRIMARY KEY,
    host        text        NOT NULL,
    pid         integer     NOT NULL,
    version     text        NOT NULL,
    started_at  timestamptz NOT NULL,
    beat_at     timestamptz,
    queue_depth integer     NOT NULL DEFAULT 0,
    running     jsonb       NOT NULL DEFAULT '{}',
    -- Which catalog the launcher runs (migration 0003): the digest of its canonical JSON
    -- ('sha256:<hex>'), when the launcher took it, the JSON list of its job names.
    catalog_digest    text,
    catalog_loaded_at timestamptz,
    catalog_jobs      jsonb,
    -- (migration 0004) Seconds between its beats, the absolute path of the catalog file it
    -- read, the JSON list of its chain names.
    heartbeat_interval double precision,
    catalog_path      text,
    catalog_chains    jsonb,
    -- (migration 0005) The absolute directory its inline runs write their log files to.
    log_dir           text,
    -- (migration 0011) Ready messages of the broker's job_runs and job_runs.dlq, as last read.
    bus_queue_depth   integer,
    bus_dlq_depth     integer
);

-- Written by accept when the store feeds a message bus; a relay publishes and stamps rows.
CREATE TABLE outbox (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic        text        NOT NULL,
    payload      jsonb       NOT NULL,
    created_at   timestamptz NOT NULL,
    published_at timestamptz,
    msg_key      text,
    leased_by    text,
    leased_until timestamptz
);

CREATE INDEX outbox_unpublished_idx ON outbox (id) WHERE published_at IS NULL;
CREATE INDEX outbox_unpublished_key_idx ON outbox (msg_key, id) WHERE published_at IS NULL;
CREATE INDEX outbox_published_idx ON outbox (published_at) WHERE published_at IS NOT NULL;

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
-- (migration 0014) The chain_overdue rule's read of the overrun chain runs that ended.
CREATE INDEX chain_runs_overrun_idx ON chain_runs (finished_at, id) WHERE overrun_at IS NOT NULL;

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

-- Access control (migration 0006): API tokens, the audit log, idempotency keys.
-- api_tokens: only the SHA-256 (hex) of a secret is stored; prefix is the secret's first
-- characters, shown in lists; jobs is a JSON list of fnmatch globs limiting the token's writes.
-- A name names one token for good (a revoked token keeps its row and its name).
CREATE TABLE api_tokens (
    name         text        PRIMARY KEY,
    role         text        NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    jobs         jsonb       NOT NULL DEFAULT '[]',
    secret_hash  text        NOT NULL UNIQUE,
    prefix       text        NOT NULL,
    created_by   text,
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz,
    revoked_at   timestamptz,
    last_used_at timestamptz
);

-- audit_log: append-only; ids grow with time and page the log (newest first).
CREATE TABLE audit_log (
    id      bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at      timestamptz NOT NULL,
    actor   text,
    action  text        NOT NULL,
    target  text,
    outcome text        NOT NULL,
    remote  text,
    detail  text
);

-- idempotency_keys: status NULL while the first request is in flight; body is its response.
-- reservation (migration 0015): the in-flight request's own name for its reservation, which
-- completing or releasing it must give.
CREATE TABLE idempotency_keys (
    owner       text        NOT NULL,
    key         text        NOT NULL,
    fingerprint text        NOT NULL,
    created_at  timestamptz NOT NULL,
    status      integer,
    body        jsonb,
    reservation text,
    PRIMARY KEY (owner, key)
);

CREATE INDEX idempotency_keys_created_idx ON idempotency_keys (created_at);

-- The web UI (migration 0008): server-side sessions and one-time login codes.
-- web_sessions: id is the SHA-256 (hex) of the cookie's 256-bit secret, never the secret. A
-- session belongs to a token: a revoked or expired token ends its sessions at once (the lookup
-- joins api_tokens). expires_at is the absolute end; last_seen_at ends an idle session.
CREATE TABLE web_sessions (
    id           text        PRIMARY KEY,
    token_name   text        NOT NULL REFERENCES api_tokens (name),
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL
);

CREATE INDEX web_sessions_token_idx ON web_sessions (token_name);
CREATE INDEX web_sessions_expires_idx ON web_sessions (expires_at);

-- web_login_codes: the one-time login links `runlane serve` prints (the SHA-256 of the code);
-- used_at is set by the one redemption a code allows.
CREATE TABLE web_login_codes (
    id          text        PRIMARY KEY,
    token_name  text        NOT NULL REFERENCES api_tokens (name),
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    used_at     timestamptz
);
-- (migration 0009) Alerts: -- incidents: one row per incident; at most one open incident per (rule, fingerprint).
CREATE TABLE incidents (
    id               text        PRIMARY KEY,
    rule             text        NOT NULL,
    fingerprint      text        NOT NULL,
    subject          text        NOT NULL,
    level            text        NOT NULL,
    state            text        NOT NULL CHECK (state IN ('open', 'resolved')),
    title            text        NOT NULL,
    detail           text,
    run_id           text,
    first_seen       timestamptz NOT NULL,
    last_seen        timestamptz NOT NULL,
    count            bigint      NOT NULL DEFAULT 1,
    resolved_at      timestamptz,
    resolution       text,
    last_notified_at timestamptz
);

CREATE UNIQUE INDEX incidents_open_idx ON incidents (rule, fingerprint) WHERE state = 'open';
CREATE INDEX incidents_first_seen_idx ON incidents (first_seen DESC, id DESC);
CREATE INDEX incidents_resolved_idx ON incidents (resolved_at) WHERE state = 'resolved';

-- incident_notices: what each target was last sent about an incident (none, firing, resolved),
-- the retry state of a failing send, and the claim of the launcher sending now.
CREATE TABLE incident_notices (
    incident_id     text        NOT NULL,
    target          text        NOT NULL,
    sent_state      text        NOT NULL DEFAULT 'none'
        CHECK (sent_state IN ('none', 'firing', 'resolved')),
    sent_at         timestamptz,
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz,
    last_error      text,
    gave_up_at      timestamptz,
    claim_owner     text,
    claim_until     timestamptz,
    PRIMARY KEY (incident_id, target)
);

-- alert_cursors: how far each rule has read the run log (a finish time).
CREATE TABLE alert_cursors (
    rule       text        PRIMARY KEY,
    position   timestamptz NOT NULL,
    updated_at timestamptz NOT NULL
);

-- alert_targets: each target's last success and its consecutive failures (status, doctor).
CREATE TABLE alert_targets (
    target        text        PRIMARY KEY,
    last_ok_at    timestamptz,
    last_error_at timestamptz,
    last_error    text,
    failures      integer     NOT NULL DEFAULT 0,
    -- (migration 0014) Sent nothing until then, by any launcher: the end of a 429's Retry-After.
    paused_until  timestamptz
);

-- (migration 0012) The run_failed rule reads the failures finished since its cursor, and the
-- last success of a job it has a failure or an open incident for.
CREATE INDEX run_log_alerting_idx ON run_log (finished_at, id)
    WHERE status IN ('failure', 'timeout', 'skipped');
CREATE INDEX run_log_job_success_idx ON run_log (job, finished_at, id) WHERE status = 'success';

-- Facts (docs/bus.md#facts): with the RabbitMQ bus, every run state change writes an outbox
-- row in the transaction that makes it (`run.<job>.<status>` on job_events, a CloudEvent);
-- `bus_config.facts` is set by the launchers of that bus, so the database bus writes none.
CREATE TABLE bus_config (
    id    integer PRIMARY KEY CHECK (id = 1),
    facts boolean NOT NULL DEFAULT false
);

CREATE FUNCTION runlane_run_fact() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM bus_config WHERE facts) THEN
        INSERT INTO outbox (topic, payload, created_at, msg_key)
        VALUES (
            'event:run.' || NEW.job || '.' || NEW.status,
            jsonb_build_object(
                'cloudevent', jsonb_build_object(
                    'specversion', '1.0',
                    'id', NEW.id::text || ':' || NEW.status,
                    'source', 'runlane://run-log',
                    'type', 'runlane.run.' || NEW.status,
                    'subject', NEW.id::text,
                    'time', to_char(clock_timestamp() AT TIME ZONE 'UTC',
                                    'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                    'datacontenttype', 'application/json'),
                'data', jsonb_build_object(
                    'run_id', NEW.id, 'job', NEW.job, 'status', NEW.status,
                    'trigger', NEW.trigger, 'attempt', NEW.attempt,
                    'exit_code', NEW.exit_code, 'end_reason', NEW.end_reason)),
            clock_timestamp(),
            NEW.id::text);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER run_log_fact_insert AFTER INSERT ON run_log
    FOR EACH ROW EXECUTE FUNCTION runlane_run_fact();
CREATE TRIGGER run_log_fact_update AFTER UPDATE OF status ON run_log
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION runlane_run_fact();
-- (migration 0013) Enabled only while facts are on: runlane_sync_facts_triggers matches them to
-- the flag (a new database is on the database bus: off).
ALTER TABLE run_log DISABLE TRIGGER run_log_fact_insert;
ALTER TABLE run_log DISABLE TRIGGER run_log_fact_update;

CREATE FUNCTION runlane_sync_facts_triggers() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    facts_on boolean;
BEGIN
    SELECT facts INTO facts_on FROM bus_config WHERE id = 1 FOR SHARE;
    facts_on := coalesce(facts_on, false);
    IF EXISTS (
        SELECT 1 FROM pg_catalog.pg_trigger
        WHERE tgrelid = 'run_log'::regclass
          AND tgname IN ('run_log_fact_insert', 'run_log_fact_update')
          AND (tgenabled IN ('O', 'A')) <> facts_on
    ) THEN
        IF facts_on THEN
            ALTER TABLE run_log ENABLE TRIGGER run_log_fact_insert;
            ALTER TABLE run_log ENABLE TRIGGER run_log_fact_update;
        ELSE
            ALTER TABLE run_log DISABLE TRIGGER run_log_fact_insert;
            ALTER TABLE run_log DISABLE TRIGGER run_log_fact_update;
        END IF;
    END IF;
END
$$;

DO $$
BEGIN
    EXECUTE format(
        'ALTER FUNCTION runlane_sync_facts_triggers() SET search_path = %I, pg_temp',
        current_schema()
    );
END
$$;
