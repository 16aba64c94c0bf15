-- 0008: the web UI's server-side sessions and one-time login codes (issue 16).
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
