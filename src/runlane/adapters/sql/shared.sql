-- Statements both dialects write the same, with `:name` parameters (the PostgreSQL registry
-- turns them into `%(name)s`): see runlane.adapters.sql.queries.with_shared. A statement whose
-- text differs between dialects (casts, JSON, locking) stays in each dialect's queries.sql.

-- name: schema_version
SELECT coalesce(max(version), 0) AS version FROM schema_migrations

-- name: run_by_dedupe_key
SELECT * FROM run_log WHERE dedupe_key = :dedupe_key

-- name: active_run_of_job
SELECT id FROM run_log
WHERE job = :job AND status IN ('queued', 'running')
ORDER BY queued_at, id
LIMIT 1

-- name: clear_override
DELETE FROM job_overrides WHERE job = :job RETURNING job

-- name: overrides
SELECT * FROM job_overrides ORDER BY job

-- name: launchers
SELECT * FROM launcher_heartbeat ORDER BY launcher_id

-- name: remove_launcher
DELETE FROM launcher_heartbeat WHERE launcher_id = :launcher_id

-- name: schedule_states
SELECT schedule_key, last_slot FROM schedule_state

-- name: chain_run_by_dedupe_key
SELECT * FROM chain_runs WHERE dedupe_key = :dedupe_key

-- name: get_event
SELECT * FROM events WHERE id = :id

-- name: event_runs
SELECT * FROM event_runs WHERE event_id = :event_id ORDER BY job, run_id

-- name: tokens
SELECT * FROM api_tokens ORDER BY name

-- name: idempotency_key
SELECT * FROM idempotency_keys WHERE owner = :owner AND key = :key

-- name: release_key
-- Only the request's own reservation: a slow request's key may have been taken over since.
DELETE FROM idempotency_keys
WHERE owner = :owner AND key = :key AND status IS NULL AND reservation = :reservation
RETURNING owner
