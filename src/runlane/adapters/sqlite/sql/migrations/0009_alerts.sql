-- 0009: alerts (issue 18): incidents opened and resolved by the launcher's alert rules, the
-- notification state of each incident at each target, the rules' cursors on the run log, and
-- the health of each notification target.
-- incidents: one row per incident; at most one open incident per (rule, fingerprint).
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
CREATE TABLE alert_targets (
    target        TEXT    PRIMARY KEY,
    last_ok_at    TEXT,
    last_error_at TEXT,
    last_error    TEXT,
    failures      INTEGER NOT NULL DEFAULT 0
);

-- The run_failed rule reads the runs finished since its cursor.
CREATE INDEX run_log_finished_idx ON run_log (finished_at, id) WHERE finished_at IS NOT NULL;
