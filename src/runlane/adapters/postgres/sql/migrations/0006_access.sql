-- 0006: access control for the faces that authenticate (issue 15): API tokens, the audit log
-- of their writes, and the Idempotency-Keys of their retried requests.
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
CREATE TABLE idempotency_keys (
    owner       text        NOT NULL,
    key         text        NOT NULL,
    fingerprint text        NOT NULL,
    created_at  timestamptz NOT NULL,
    status      integer,
    body        jsonb,
    PRIMARY KEY (owner, key)
);

CREATE INDEX idempotency_keys_created_idx ON idempotency_keys (created_at);
