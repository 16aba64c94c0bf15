-- Named statements of the SQLite store (loaded by runlane.adapters.sql.queries.load_queries).
-- `:now` and every derived time are computed by the adapter from its Clock, in the fixed-width
-- text form; SQLite's own time functions are never used (their precision and format differ).
-- Writes run inside BEGIN IMMEDIATE, so one writer at a time: no row locks are needed.

-- name: bootstrap_migrations
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    applied_at TEXT    NOT NULL
)

-- name: migrations_table_exists
SELECT count(*) AS present FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'


-- name: record_migration
INSERT INTO schema_migrations (version, applied_at) VALUES (:version, :now)



-- name: insert_run
INSERT INTO run_log (
    id, job, status, trigger, requested_by, params, dedupe_key, parent_run_id,
    chain_root_id, event_id, downstream, scheduled_for, attempt, retry_of, max_attempts,
    deadline_seconds, kill_grace_seconds, executor, overlap, not_before, queue_expires_at,
    queued_at, started_at, deadline_at, finished_at, end_reason, note, traceparent
) VALUES (
    :id, :job, :status, :trigger, :requested_by, :params, :dedupe_key, :parent_run_id,
    :chain_root_id, :event_id, :downstream, :scheduled_for, :attempt, :retry_of, :max_attempts,
    :deadline_seconds, :kill_grace_seconds, :executor, :overlap, :not_before, :queue_expires_at,
    :now,
    CASE WHEN :status = 'running' THEN :now END,
    CASE WHEN :status = 'running' THEN :deadline_at END,
    CASE WHEN :status NOT IN ('queued', 'running') THEN :now END,
    :end_reason, :note, :traceparent
)
ON CONFLICT (dedupe_key) DO NOTHING
RETURNING *

-- name: insert_outbox
INSERT INTO outbox (topic, payload, created_at, msg_key) VALUES (:topic, :payload, :now, :key)

-- name: claim_candidates
-- The first coalesce() term matches run_log_claim_idx; the not_before term is the exact rule.
-- INDEXED BY: without statistics (the launcher never runs ANALYZE) SQLite took
-- run_log_status_queued_idx for `status = 'queued'`, read every queued run and sorted them at
-- each claim: O(backlog) a claim, a third of the embedded launcher's throughput.
SELECT id, job, executor, overlap, deadline_seconds
FROM run_log INDEXED BY run_log_claim_idx
WHERE status = 'queued'
  AND coalesce(not_before, queued_at) <= :now
  AND (not_before IS NULL OR not_before <= :now)
  AND (queue_expires_at IS NULL OR queue_expires_at > :now)
  AND executor IN (SELECT value FROM json_each(:executors))
ORDER BY coalesce(not_before, queued_at), queued_at, id
LIMIT :scan

-- name: running_counts
-- Only what admission looks at: the candidates' non-`allow` jobs and the capped executors.
-- INDEXED BY: through the running runs' partial index, O(running). Left to itself SQLite read
-- the whole of run_log_job_status_idx (the OR defeats its (job, status) lookup): every claim
-- then cost O(every run ever logged).
SELECT job, executor, count(*) AS n
FROM run_log INDEXED BY run_log_running_lease_idx
WHERE status = 'running'
  AND (job IN (SELECT value FROM json_each(:jobs))
       OR executor IN (SELECT value FROM json_each(:capped)))
GROUP BY job, executor

-- name: claim_one
UPDATE run_log SET
    status = 'running',
    lease_owner = :owner,
    lease_token = :token,
    lease_generation = lease_generation + 1,
    lease_expires_at = :expires_at,
    started_at = coalesce(started_at, :now),
    deadline_at = coalesce(deadline_at, :deadline_at)
WHERE id = :id AND status = 'queued'
RETURNING *

-- name: abandoned_candidates
-- INDEXED BY: the running runs' partial index in expiry order (not every running run, sorted).
SELECT id FROM run_log INDEXED BY run_log_running_lease_idx
WHERE status = 'running' AND lease_token IS NOT NULL AND lease_expires_at < :now
  AND executor IN (SELECT value FROM json_each(:executors))
ORDER BY lease_expires_at, id
LIMIT :limit

-- name: reclaim_one
-- The expiry test is repeated here: never trust the candidate snapshot.
UPDATE run_log SET
    lease_owner = :owner,
    lease_token = :token,
    lease_generation = lease_generation + 1,
    lease_expires_at = :expires_at
WHERE id = :id AND status = 'running' AND lease_token IS NOT NULL AND lease_expires_at < :now
RETURNING *

-- name: renew_one
-- No expiry test: a lease that expired while nobody took it over (same token and generation)
-- is safely revived, so an outcome survives a database outage longer than the TTL.
UPDATE run_log SET lease_expires_at = :expires_at
WHERE id = :id AND status = 'running' AND lease_token = :token AND lease_generation = :gen
RETURNING id

-- name: set_external_id
UPDATE run_log SET external_id = :external_id
WHERE id = :id AND status = 'running' AND lease_token = :token AND lease_generation = :gen
  AND lease_expires_at > :now
RETURNING id

-- name: finish
UPDATE run_log SET
    status = :status,
    end_reason = :end_reason,
    exit_code = :exit_code,
    error_code = :error_code,
    log_tail = :log_tail,
    -- The rule of core.accept_rules.finish_note, here to be atomic with the update.
    note = CASE WHEN :note IS NOT NULL THEN :note
                WHEN error_code IS NOT NULL THEN NULL ELSE note END,
    -- When the run ended (the save may have waited out an outage), never before it started.
    finished_at = max(coalesce(started_at, :finished_at), :finished_at),
    external_id = coalesce(:external_id, external_id)
WHERE id = :id AND status = 'running' AND lease_token = :token AND lease_generation = :gen
  AND lease_expires_at > :now
RETURNING *

-- name: release
UPDATE run_log SET
    status = 'queued',
    lease_owner = NULL,
    lease_token = NULL,
    lease_expires_at = NULL,
    not_before = :not_before,
    started_at = NULL,
    deadline_at = NULL,
    error_code = :error_code,
    note = :note
WHERE id = :id AND status = 'running' AND lease_token = :token AND lease_generation = :gen
  AND lease_expires_at > :now
RETURNING id

-- name: finish_unleased
-- A leased running row must be finished through its lease.
UPDATE run_log SET
    status = :status,
    end_reason = :end_reason,
    exit_code = :exit_code,
    error_code = :error_code,
    log_tail = :log_tail,
    note = :note,
    finished_at = :now
WHERE id = :id AND status = :expected AND (status <> 'running' OR lease_token IS NULL)
RETURNING *

-- name: retry_repairs_now
UPDATE run_log SET not_before = :now
WHERE status = 'queued' AND error_code = :error_code AND not_before > :now
  AND job IN (SELECT value FROM json_each(:jobs))
RETURNING id

-- name: expire_queued
UPDATE run_log SET status = 'skipped', end_reason = 'expired', finished_at = :now
WHERE id IN (
    SELECT id FROM run_log INDEXED BY run_log_queue_expiry_idx
    WHERE status = 'queued' AND queue_expires_at <= :now
    ORDER BY queue_expires_at, id
    LIMIT :limit
)
RETURNING *

-- name: sweep_orphans
-- Running past deadline + grace with nobody supervising: no lease (an SDK child whose process
-- died) or an expired one that no launcher able to run it has taken over.
UPDATE run_log SET status = 'timeout', end_reason = 'orphaned', error_code = 'orphaned',
    finished_at = :now,
    note = :note  -- core.accept_rules.ORPHANED_NOTE
WHERE id IN (
    SELECT id FROM run_log INDEXED BY run_log_running_lease_idx
    WHERE status = 'running' AND deadline_at IS NOT NULL AND deadline_at < :cutoff
      AND (lease_token IS NULL OR lease_expires_at < :now)
    ORDER BY deadline_at, id
    LIMIT :limit
)
RETURNING *

-- name: cancel_queued
UPDATE run_log SET status = 'cancelled', end_reason = 'cancelled', finished_at = :now, note = :note
WHERE id = :id AND status = 'queued'
RETURNING *

-- name: cancel_running
-- Idempotent: a second request keeps the first request's time.
UPDATE run_log SET cancel_requested_at = coalesce(cancel_requested_at, :now)
WHERE id = :id AND status = 'running'
RETURNING *

-- name: cancel_requests
-- O(running), polled every claim interval (SQLite otherwise walked the primary key: O(table)).
SELECT id FROM run_log INDEXED BY run_log_running_lease_idx
WHERE status = 'running' AND lease_owner = :owner AND cancel_requested_at IS NOT NULL
ORDER BY id

-- name: run_ids_by_prefix
-- A short id's runs: a range on the primary key (operations.lookup), no row read.
SELECT id FROM run_log WHERE id BETWEEN :lo AND :hi ORDER BY id LIMIT :limit

-- name: run_statuses
-- The status of each run of :ids (a JSON list): the bus's consumer settles a batch of commands
-- with one read, each a probe of the primary key.
SELECT id, status FROM run_log WHERE id IN (SELECT value FROM json_each(:ids))

-- name: get_run
SELECT * FROM run_log WHERE id = :id

-- The run list is composed by SqlStoreBase.list_runs from these fixed texts: the select, one
-- `list_runs_where_<filter>` clause per filter that is set (joined by AND, in a fixed order),
-- then the order; values are always bound. Times are fixed-width UTC text, so text comparison
-- is time comparison. The basic view's select (`view=basic`) is `RUN_LIST_BASIC_SELECT` in
-- adapters/sql/base.py, the same in both dialects.
-- name: list_runs_select
SELECT * FROM run_log

-- name: list_runs_where_job
job = :job

-- name: list_runs_where_status
status = :status

-- name: list_runs_where_trigger
trigger = :trigger

-- name: list_runs_where_requested_by
requested_by = :requested_by

-- name: list_runs_where_parent_run_id
parent_run_id = :parent_run_id

-- name: list_runs_where_chain_root_id
chain_root_id = :chain_root_id

-- name: list_runs_where_retry_of
retry_of = :retry_of

-- name: list_runs_where_since
queued_at >= :since

-- name: list_runs_where_until
queued_at < :until

-- name: list_runs_where_before
(queued_at, id) < (:before_at, :before_id)

-- name: list_runs_order
ORDER BY queued_at DESC, id DESC
LIMIT :limit

-- name: count_queued
-- O(queued), for every heartbeat (SQLite otherwise counted through all of
-- run_log_job_status_idx: O(table)).
SELECT count(*) AS n FROM run_log INDEXED BY run_log_claim_idx WHERE status = 'queued'

-- name: queued_by_executor
-- O(queued), for the metrics exporter, through the partial index of the queued runs.
SELECT executor, count(*) AS n FROM run_log INDEXED BY run_log_claim_idx
WHERE status = 'queued' GROUP BY executor

-- name: outbox_oldest_pending
-- The first unpublished row by id is the oldest: one probe of outbox_unpublished_idx.
SELECT created_at FROM outbox INDEXED BY outbox_unpublished_idx
WHERE published_at IS NULL ORDER BY id LIMIT 1

-- name: running_by_launcher
-- O(running), like count_queued: through the partial index of the running runs.
SELECT coalesce(lease_owner, '') AS owner, executor, count(*) AS n
FROM run_log INDEXED BY run_log_running_lease_idx WHERE status = 'running'
GROUP BY 1, 2

-- name: set_override
INSERT INTO job_overrides (job, paused_until, reason, created_by, created_at)
VALUES (:job, :paused_until, :reason, :created_by, :now)
ON CONFLICT (job) DO UPDATE SET
    paused_until = excluded.paused_until,
    reason = excluded.reason,
    created_by = excluded.created_by,
    created_at = excluded.created_at
RETURNING *



-- name: beat
INSERT INTO launcher_heartbeat (launcher_id, host, pid, version, started_at, beat_at, queue_depth, running,
                                catalog_digest, catalog_loaded_at, catalog_jobs, catalog_path,
                                catalog_chains, heartbeat_interval, log_dir,
                                bus_queue_depth, bus_dlq_depth)
VALUES (:launcher_id, :host, :pid, :version, :started_at, :now, :queue_depth, :running,
        :catalog_digest, :catalog_loaded_at, :catalog_jobs, :catalog_path, :catalog_chains,
        :heartbeat_interval, :log_dir, :bus_queue_depth, :bus_dlq_depth)
ON CONFLICT (launcher_id) DO UPDATE SET
    host = excluded.host,
    pid = excluded.pid,
    version = excluded.version,
    started_at = excluded.started_at,
    beat_at = excluded.beat_at,
    queue_depth = excluded.queue_depth,
    running = excluded.running,
    catalog_digest = excluded.catalog_digest,
    catalog_loaded_at = excluded.catalog_loaded_at,
    catalog_jobs = excluded.catalog_jobs,
    catalog_path = excluded.catalog_path,
    catalog_chains = excluded.catalog_chains,
    heartbeat_interval = excluded.heartbeat_interval,
    log_dir = excluded.log_dir,
    bus_queue_depth = excluded.bus_queue_depth,
    bus_dlq_depth = excluded.bus_dlq_depth



-- name: prune_launchers
-- Heartbeat rows of launchers silent for longer than the bound, or ten of their own intervals
-- when that is longer: a dead launcher's row goes, a slow-beating live one's stays.
DELETE FROM launcher_heartbeat
WHERE beat_at < :cutoff
  AND (heartbeat_interval IS NULL
       OR (julianday(:now) - julianday(beat_at)) * 86400.0 > 10 * heartbeat_interval)
RETURNING launcher_id

-- name: write_probe
-- Inside a transaction that is rolled back: fails when the database cannot be written.
INSERT INTO launcher_heartbeat (launcher_id, host, pid, version, started_at, beat_at, queue_depth, running)
VALUES (:launcher_id, '', 0, '', :now, :now, 0, '{}')

-- --- triggers: schedule state, chain runs, events ------------------------------------------


-- name: advance_schedule
-- Monotonic: racing launchers can only move a schedule forward.
INSERT INTO schedule_state (schedule_key, last_slot, updated_at)
VALUES (:schedule_key, :last_slot, :now)
ON CONFLICT (schedule_key) DO UPDATE SET
    last_slot = max(schedule_state.last_slot, excluded.last_slot),
    updated_at = excluded.updated_at

-- name: forget_schedule
DELETE FROM schedule_state WHERE schedule_key = :schedule_key

-- name: insert_chain_run
-- Any conflict: a scheduled chain run has a deterministic id as well as its dedupe key.
INSERT INTO chain_runs (
    id, chain, dedupe_key, trigger, requested_by, scheduled_for, status, end_reason,
    started_at, deadline_at, finished_at
) VALUES (
    :id, :chain, :dedupe_key, :trigger, :requested_by, :scheduled_for, :status, :end_reason,
    :now, :deadline_at, CASE WHEN :status <> 'running' THEN :now END
)
ON CONFLICT DO NOTHING
RETURNING *


-- name: chain_run_ids_by_prefix
SELECT id FROM chain_runs WHERE id BETWEEN :lo AND :hi ORDER BY id LIMIT :limit

-- name: get_chain_run
SELECT * FROM chain_runs WHERE id = :id

-- name: active_chain_runs
-- One page, oldest first; the next page starts after the last (started_at, id) of this one.
SELECT * FROM chain_runs
WHERE status = 'running'
  AND (:after_at IS NULL OR (started_at, id) > (:after_at, :after_id))
ORDER BY started_at, id
LIMIT :limit

-- name: list_chain_runs
SELECT * FROM chain_runs
WHERE (:chain IS NULL OR chain = :chain)
ORDER BY started_at DESC, id DESC
LIMIT :limit

-- name: mark_chain_overrun
UPDATE chain_runs SET overrun_at = coalesce(overrun_at, :now) WHERE id = :id RETURNING *

-- name: finish_chain_run
UPDATE chain_runs SET status = :status, end_reason = :end_reason, finished_at = :now
WHERE id = :id AND status = 'running'
RETURNING *

-- name: insert_event
INSERT INTO events (id, key, data, occurred_at) VALUES (:id, :key, :data, :now)
ON CONFLICT (id) DO NOTHING
RETURNING *

-- name: insert_event_fact
-- The fact of the event just inserted (docs/bus.md#facts), in its transaction, while
-- bus_config.facts is set: a CloudEvent under `cloudevent` (json_patch drops a null
-- traceparent), its data under `data`.
INSERT INTO outbox (topic, payload, created_at, msg_key)
SELECT
    'event:' || e.key,
    json_object(
        'cloudevent', json_patch(
            json_object(
                'specversion', '1.0', 'id', e.id, 'source', :fact_source, 'type', e.key,
                'time', e.occurred_at, 'datacontenttype', 'application/json'),
            json_object('traceparent', :fact_traceparent)),
        'data', json(e.data)),
    strftime('%Y-%m-%dT%H:%M:%f000Z', 'now'),
    'event:' || e.id
FROM events e
WHERE e.id = :id AND EXISTS (SELECT 1 FROM bus_config WHERE facts = 1)


-- name: list_events
SELECT * FROM events
WHERE (:key IS NULL OR key = :key)
ORDER BY occurred_at DESC, id DESC
LIMIT :limit

-- name: link_event_run
INSERT INTO event_runs (event_id, run_id, job, started) VALUES (:event_id, :run_id, :job, :started)
ON CONFLICT (event_id, run_id) DO NOTHING


-- name: events_of_run
SELECT * FROM event_runs WHERE run_id = :run_id ORDER BY event_id

-- --- connection set-up (run once per connection, in this order: CONNECTION_PRAGMAS) ----------

-- name: pragma_journal_wal
-- Readers never block the one writer, and the writer never blocks readers.
PRAGMA journal_mode=WAL

-- name: pragma_synchronous_normal
-- In WAL mode: never corrupt, no fsync per commit; a power loss may lose the last commits.
PRAGMA synchronous=NORMAL

-- name: pragma_busy_timeout
-- A writer waits up to 5 s for another's lock instead of failing at once.
PRAGMA busy_timeout=5000

-- name: pragma_foreign_keys_off
PRAGMA foreign_keys=OFF

-- name: data_version
-- Changes when another connection (another process: the CLI, a second launcher) has committed
-- since this connection last asked; never for this connection's own commits.
PRAGMA data_version

-- --- the web UI: sessions, one-time login codes, the latest run of each job -------------------

-- name: latest_runs
-- The newest run of each job of :jobs (a JSON list), one probe of run_log_job_queued_idx each.
SELECT r.* FROM json_each(:jobs) AS j
JOIN run_log AS r ON r.id = (
    SELECT id FROM run_log WHERE job = j.value ORDER BY queued_at DESC, id DESC LIMIT 1
)

-- name: insert_web_session
INSERT INTO web_sessions (id, token_name, created_at, expires_at, last_seen_at)
VALUES (:id, :token_name, :now, :expires_at, :now)
RETURNING *

-- name: web_session
-- A live session of a live token: not past its absolute end, seen since :idle_since, its
-- token neither revoked nor expired. The token's columns come prefixed with token_.
SELECT s.*, t.role AS token_role, t.jobs AS token_jobs,
       t.secret_hash AS token_secret_hash, t.prefix AS token_prefix,
       t.created_by AS token_created_by, t.created_at AS token_created_at,
       t.expires_at AS token_expires_at, t.revoked_at AS token_revoked_at,
       t.last_used_at AS token_last_used_at
FROM web_sessions AS s JOIN api_tokens AS t ON t.name = s.token_name
WHERE s.id = :id AND s.expires_at > :now AND s.last_seen_at > :idle_since
  AND t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > :now)

-- name: touch_web_session
UPDATE web_sessions SET last_seen_at = :now WHERE id = :id AND last_seen_at < :since

-- name: delete_web_session
DELETE FROM web_sessions WHERE id = :id RETURNING id

-- name: prune_web_sessions
-- Sessions past their absolute end or idle since :idle_since, and login codes past theirs.
DELETE FROM web_sessions WHERE expires_at <= :now OR last_seen_at <= :idle_since RETURNING id

-- name: prune_login_codes
DELETE FROM web_login_codes WHERE expires_at <= :now RETURNING id

-- name: insert_login_code
INSERT INTO web_login_codes (id, token_name, created_at, expires_at)
VALUES (:id, :token_name, :now, :expires_at)
RETURNING *

-- name: redeem_login_code
-- One redemption per code: the first caller sets used_at and gets the token's name.
UPDATE web_login_codes SET used_at = :now
WHERE id = :id AND used_at IS NULL AND expires_at > :now
RETURNING token_name

-- name: count_tokens
SELECT count(*) AS n FROM api_tokens

-- name: insert_token
INSERT INTO api_tokens (name, role, jobs, secret_hash, prefix, created_by, created_at, expires_at)
VALUES (:name, :role, :jobs, :secret_hash, :prefix, :created_by, :now, :expires_at)
ON CONFLICT (name) DO NOTHING
RETURNING *

-- name: token_by_hash
-- Through the UNIQUE index of secret_hash; a revoked or expired token reads as none.
SELECT * FROM api_tokens
WHERE secret_hash = :secret_hash AND revoked_at IS NULL
  AND (expires_at IS NULL OR expires_at > :now)

-- name: revoke_token
UPDATE api_tokens SET revoked_at = coalesce(revoked_at, :now) WHERE name = :name RETURNING *

-- name: touch_token
UPDATE api_tokens SET last_used_at = :now
WHERE name = :name AND (last_used_at IS NULL OR last_used_at < :since)

-- name: insert_audit
INSERT INTO audit_log (at, actor, action, target, outcome, remote, detail)
VALUES (:now, :actor, :action, :target, :outcome, :remote, :detail)
RETURNING *

-- name: reserve_key
-- A row older than :since is stale, and one still in flight since before :abandoned_since was
-- left by a process that died: either is taken over as if absent (never replayed).
INSERT INTO idempotency_keys (owner, key, fingerprint, created_at, reservation)
VALUES (:owner, :key, :fingerprint, :now, :reservation)
ON CONFLICT (owner, key) DO UPDATE SET
    fingerprint = excluded.fingerprint,
    created_at = excluded.created_at,
    reservation = excluded.reservation,
    status = NULL,
    body = NULL
WHERE idempotency_keys.created_at < :since
   OR (idempotency_keys.status IS NULL AND idempotency_keys.created_at < :abandoned_since)
RETURNING owner

-- name: complete_key
-- Only while the key is still this request's reservation, in flight: one slower than the
-- takeover window may find it another request's now.
UPDATE idempotency_keys SET status = :status, body = :body
WHERE owner = :owner AND key = :key AND status IS NULL AND reservation = :reservation
RETURNING owner

-- name: prune_keys
DELETE FROM idempotency_keys WHERE created_at < :since RETURNING owner

-- name: audit
SELECT * FROM audit_log WHERE (:before IS NULL OR id < :before) ORDER BY id DESC LIMIT :limit


-- name: outbox_lease
-- The relay's next batch (docs/bus.md#relay): the oldest rows nobody holds a live lease on, each
-- the oldest unpublished row of its key (one run's messages stay in order), leased to this
-- relay. One writer at a time on SQLite: the write transaction serialises relays.
UPDATE outbox
SET leased_by = :owner, leased_until = :lease_until
WHERE id IN (
    SELECT o.id FROM outbox o
    WHERE o.published_at IS NULL
      AND (o.leased_until IS NULL OR o.leased_until < :now)
      AND (o.msg_key IS NULL OR NOT EXISTS (
          SELECT 1 FROM outbox p
          WHERE p.msg_key = o.msg_key AND p.id < o.id AND p.published_at IS NULL))
    ORDER BY o.id
    LIMIT :limit
)
RETURNING id, topic, payload, created_at, msg_key

-- name: outbox_mark_sent
UPDATE outbox SET published_at = :now, leased_by = NULL, leased_until = NULL
WHERE id IN (SELECT value FROM json_each(:ids)) AND published_at IS NULL

-- name: outbox_release
UPDATE outbox SET leased_by = NULL, leased_until = NULL
WHERE id IN (SELECT value FROM json_each(:ids)) AND leased_by = :owner AND published_at IS NULL

-- name: outbox_prune_returning
DELETE FROM outbox WHERE id IN (
    SELECT id FROM outbox
    WHERE published_at IS NOT NULL AND published_at < :cutoff
    LIMIT :limit
)
RETURNING id

-- name: outbox_pending_count
SELECT count(*) AS n FROM outbox WHERE published_at IS NULL

-- name: insert_outbox_fact
INSERT INTO outbox (topic, payload, created_at, msg_key) VALUES (:topic, :payload, :now, :key)

-- name: set_bus_facts
-- Whether run state changes write facts to the outbox (the RabbitMQ bus's launchers: yes).
INSERT INTO bus_config (id, facts) VALUES (1, :facts)
ON CONFLICT (id) DO UPDATE SET facts = excluded.facts
