-- 0009: alerts (issue 18): incidents opened and resolved by the launcher's alert rules, the
-- notification state of each incident at each target, the rules' cursors on the run log, and
-- the health of each notification target.
-- incidents: one row per incident; at most one open incident per (rule, fingerprint).
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
    failures      integer     NOT NULL DEFAULT 0
);

-- The run_failed rule reads the runs finished since its cursor.
CREATE INDEX run_log_finished_idx ON run_log (finished_at, id) WHERE finished_at IS NOT NULL;
