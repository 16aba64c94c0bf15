-- 0006: access control for the faces that authenticate (issue 15): API tokens, the audit log
-- of their writes, and the Idempotency-Keys of their retried requests.
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
CREATE TABLE idempotency_keys (
    owner        TEXT NOT NULL,
    key          TEXT NOT NULL,
    fingerprint  TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    status       INTEGER,
    body         TEXT,
    PRIMARY KEY (owner, key)
);

CREATE INDEX idempotency_keys_created_idx ON idempotency_keys (created_at);
