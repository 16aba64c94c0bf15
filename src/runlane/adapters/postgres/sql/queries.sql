-- Named statements of the PostgreSQL store (loaded by runlane.adapters.sql.queries.load_queries).
-- Every time is `coalesce(%(now)s::timestamptz, clock_timestamp())`: database time in production,
-- the pinned Clock in tests. clock_timestamp(), not now(): now() is the transaction start.

-- name: bootstrap_migrations
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer     PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
)

-- name: migrations_table_exists
SELECT to_regclass('schema_migrations') IS NOT NULL AS present


-- name: migrate_lock
SELECT pg_advisory_xact_lock(hashtext('runlane:migrate'))

-- name: record_migration
INSERT INTO schema_migrations (version, applied_at)
VALUES (%(version)s, coalesce(%(now)s::timestamptz, clock_timestamp()))

-- name: migration_unbounded
-- In each migration's transaction on a store with a launcher's bounds: a migration may rewrite
-- a large table, or wait for the locks of launchers still running, for as long as it takes.
SELECT set_config('statement_timeout', '0', true), set_config('lock_timeout', '0', true)

-- name: session_utc
-- Once per connection of a store without bounds: times come back in UTC whatever the server's
-- default zone (no statement depends on the session's zone: timestamptz values are instants).
SET TIME ZONE 'UTC'

-- name: session_bounds
-- Once per connection of a store with bounds (the launcher's), in place of SET TIME ZONE: the
-- server gives up on a lock wait and on a statement itself, before the client hangs up. A bound
-- the URL sets itself (options=-c statement_timeout=…) is kept: NULL here.
SELECT set_config('TimeZone', 'UTC', false),
       set_config('statement_timeout',
                  coalesce(%(statement_timeout)s::text, current_setting('statement_timeout')),
                  false),
       set_config('lock_timeout',
                  coalesce(%(lock_timeout)s::text, current_setting('lock_timeout')), false)

-- name: db_now
SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now

-- name: listen_wakeup
LISTEN runlane_wakeup

-- name: job_lock
-- Serialises accepts of one job so the overlap check and the insert are atomic.
SELECT pg_advisory_xact_lock(hashtext('runlane:job:' || %(job)s))



-- name: insert_run
-- One statement: the row, the wake-up (queued rows only) and the outbox row commit together.
WITH n AS (SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now),
ins AS (
    INSERT INTO run_log (
        id, job, status, trigger, requested_by, params, dedupe_key, parent_run_id,
        chain_root_id, event_id, downstream, scheduled_for, attempt, retry_of, max_attempts,
        deadline_seconds, kill_grace_seconds, executor, overlap, not_before, queue_expires_at,
        queued_at, started_at, deadline_at, finished_at, end_reason, note, traceparent
    )
    SELECT
        %(id)s::uuid, %(job)s, %(status)s::text, %(trigger)s, %(requested_by)s,
        %(params)s::jsonb, %(dedupe_key)s, %(parent_run_id)s::uuid, %(chain_root_id)s::uuid,
        %(event_id)s, %(downstream)s::jsonb, %(scheduled_for)s::timestamptz, %(attempt)s,
        %(retry_of)s::uuid, %(max_attempts)s, %(deadline_seconds)s, %(kill_grace_seconds)s,
        %(executor)s, %(overlap)s, %(not_before)s::timestamptz,
        n.now + make_interval(secs => %(queue_ttl_seconds)s::float8),
        n.now,
        CASE WHEN %(status)s::text = 'running' THEN n.now END,
        CASE WHEN %(status)s::text = 'running'
             THEN n.now + make_interval(secs => %(deadline_seconds)s::float8) END,
        CASE WHEN %(status)s::text NOT IN ('queued', 'running') THEN n.now END,
        %(end_reason)s, %(note)s, %(traceparent)s
    FROM n
    ON CONFLICT (dedupe_key) DO NOTHING
    RETURNING *
),
wake AS (SELECT pg_notify('runlane_wakeup', '') FROM ins WHERE ins.status = 'queued'),
outbox_row AS (
    INSERT INTO outbox (topic, payload, created_at, msg_key)
    SELECT %(outbox_topic)s, %(outbox_payload)s::jsonb, n.now, ins.id::text
    FROM ins, n
    WHERE %(outbox)s::boolean AND ins.status = 'queued'
    RETURNING id
)
SELECT ins.*, (SELECT count(*) FROM wake) AS woken FROM ins

-- name: claim_session
-- Once per claim connection: no bitmap scans. The candidate scan must walk run_log_claim_idx in
-- order and stop at the LIMIT. With statistics that underestimate the backlog (autovacuum has not
-- analyzed since it grew) the planner otherwise reads every due run through a bitmap scan and
-- sorts them, so each claim costs O(backlog) until the next ANALYZE. Set for the session, so
-- the common claim (claim_fast) needs no transaction of its own to set it.
SET enable_bitmapscan = off

-- name: claim_lock
-- One claimer at a time across launchers for claims that decide admission (claim_candidates +
-- claim_update): keeps executor caps and overlap exact. Fast claims (claim_fast) take the same
-- lock shared: they wait for this one, not for each other.
SELECT pg_advisory_xact_lock(hashtext('runlane:claim'))

-- name: claim_candidates
-- (In candidate scans `now` is a scalar subquery, never a join with `n`: joined, the planner
-- reads every due run and sorts them before the LIMIT, which made each claim cost O(backlog).)
-- Candidates (locked) and the running counts admission needs, from one snapshot. Counts cover
-- only the candidates' non-`allow` jobs and the capped executors, so the cost does not grow with
-- everything that is running. The first coalesce() term matches run_log_claim_idx; the not_before term is
-- the exact rule.
WITH n AS (SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now),
cand AS (
    SELECT r.id, r.job, r.executor, r.overlap,
           coalesce(r.not_before, r.queued_at) AS due_at, r.queued_at
    FROM run_log r
    WHERE r.status = 'queued'
      AND coalesce(r.not_before, r.queued_at) <= (SELECT now FROM n)
      AND (r.not_before IS NULL OR r.not_before <= (SELECT now FROM n))
      AND (r.queue_expires_at IS NULL OR r.queue_expires_at > (SELECT now FROM n))
      AND r.executor = ANY(%(executors)s::text[])
    ORDER BY coalesce(r.not_before, r.queued_at), r.queued_at, r.id
    LIMIT %(scan)s
    FOR UPDATE OF r SKIP LOCKED
),
counts AS (
    SELECT coalesce(json_agg(json_build_array(x.job, x.executor, x.n)), '[]') AS running
    FROM (
        SELECT job, executor, count(*) AS n
        FROM run_log
        WHERE status = 'running'
          AND (job IN (SELECT job FROM cand WHERE overlap <> 'allow')
               OR executor = ANY(%(capped)s::text[]))
        GROUP BY job, executor
    ) x
)
SELECT cand.id, cand.job, cand.executor, cand.overlap, counts.running
FROM cand, counts
ORDER BY cand.due_at, cand.queued_at, cand.id

-- name: claim_update
WITH n AS (SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now)
UPDATE run_log r SET
    status = 'running',
    lease_owner = %(owner)s,
    lease_token = gen_random_uuid(),
    lease_generation = r.lease_generation + 1,
    lease_expires_at = n.now + make_interval(secs => %(ttl)s::float8),
    started_at = coalesce(r.started_at, n.now),
    deadline_at = coalesce(r.deadline_at, n.now + make_interval(secs => r.deadline_seconds))
FROM n
-- By primary key whatever the statistics say (as claim_fast's update, finish_many).
WHERE r.id = ANY(%(ids)s::uuid[]) AND (r.status = 'queued') IS TRUE
RETURNING r.*, n.now AS db_now

-- name: claim_fast
-- The whole claim in one statement, for the common case where admission has nothing to decide:
-- the first %(limit)s due candidates (locked) are all `overlap: allow` on executors without a
-- cap, so `select_admissible` takes every one of them in order. Otherwise nothing is updated and
-- the caller claims with claim_candidates + claim_update. One result row always comes back:
-- `fast` is NULL when nothing is due, false when admission must decide; the run columns are
-- NULL when nothing was claimed.
-- The shared advisory lock (taken before the candidate scan: `now` is read from `n` to start
-- it) lets fast claims run side by side but waits for a two-step claim (claim_lock), which
-- holds its candidates locked until it commits: without the wait a fast claim would skip them
-- all and come back empty while runs are due. The lock comes first in `n` so that `now` is
-- read after the wait.
WITH n AS (SELECT pg_advisory_xact_lock_shared(hashtext('runlane:claim')) AS locked,
                  coalesce(%(now)s::timestamptz, clock_timestamp()) AS now),
cand AS (
    SELECT r.id, r.overlap = 'allow' AND r.executor <> ALL(%(capped)s::text[]) AS free
    FROM run_log r
    WHERE r.status = 'queued'
      AND coalesce(r.not_before, r.queued_at) <= (SELECT now FROM n)
      AND (r.not_before IS NULL OR r.not_before <= (SELECT now FROM n))
      AND (r.queue_expires_at IS NULL OR r.queue_expires_at > (SELECT now FROM n))
      AND r.executor = ANY(%(executors)s::text[])
    ORDER BY coalesce(r.not_before, r.queued_at), r.queued_at, r.id
    LIMIT %(limit)s
    FOR UPDATE OF r SKIP LOCKED
),
verdict AS (SELECT bool_and(cand.free) AS fast FROM cand),
upd AS (
    UPDATE run_log r SET
        status = 'running',
        lease_owner = %(owner)s,
        lease_token = gen_random_uuid(),
        lease_generation = r.lease_generation + 1,
        lease_expires_at = n.now + make_interval(secs => %(ttl)s::float8),
        started_at = coalesce(r.started_at, n.now),
        deadline_at = coalesce(r.deadline_at, n.now + make_interval(secs => r.deadline_seconds))
    -- The taken rows by primary key, whatever the statistics say: joined with `cand` and
    -- tested with a plain `status = 'queued'`, the planner read every queued run through
    -- run_log_status_queued_idx and matched each against every candidate when the statistics
    -- were taken while the queue was empty (a backlog that built up since): O(backlog x batch)
    -- per claim, 0.42 s for a batch of 64 with 50,000 runs waiting. (`... IS TRUE` is the same
    -- test, status being NOT NULL, but no index condition.) tests/conformance/test_claim_plan.py.
    FROM n, verdict
    WHERE verdict.fast AND r.id = ANY(ARRAY(SELECT cand.id FROM cand))
      AND (r.status = 'queued') IS TRUE
    RETURNING r.*, n.now AS db_now
)
SELECT upd.*, verdict.fast FROM verdict LEFT JOIN upd ON true
ORDER BY coalesce(upd.not_before, upd.queued_at), upd.queued_at, upd.id

-- name: claim_abandoned
-- The expiry test is repeated in the UPDATE: never trust the candidate snapshot.
WITH n AS (SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now),
c AS (
    SELECT r.id FROM run_log r
    WHERE r.status = 'running' AND r.lease_token IS NOT NULL
      AND r.lease_expires_at < (SELECT now FROM n)
      AND r.executor = ANY(%(executors)s::text[])
    ORDER BY r.lease_expires_at, r.id
    LIMIT %(limit)s
    FOR UPDATE OF r SKIP LOCKED
)
UPDATE run_log r SET
    lease_owner = %(owner)s,
    lease_token = gen_random_uuid(),
    lease_generation = r.lease_generation + 1,
    lease_expires_at = n.now + make_interval(secs => %(ttl)s::float8)
FROM n
-- By primary key, as claim_fast's update.
WHERE r.id = ANY(ARRAY(SELECT c.id FROM c)) AND (r.status = 'running') IS TRUE
  AND r.lease_token IS NOT NULL AND (r.lease_expires_at < n.now) IS TRUE
RETURNING r.*, n.now AS db_now

-- name: renew
-- No expiry test: a lease that expired while nobody took it over (same token and generation)
-- is safely revived, so an outcome survives a database outage longer than the TTL.
WITH n AS (SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now)
UPDATE run_log r SET lease_expires_at = n.now + make_interval(secs => %(ttl)s::float8)
FROM n, unnest(%(ids)s::uuid[], %(tokens)s::uuid[], %(gens)s::bigint[]) AS l(id, token, gen)
-- By primary key, as in finish_many: `status = 'running'` as a plain test would let the planner
-- read all of run_log_running_lease_idx, which keeps an entry for every run finished since the
-- last VACUUM.
WHERE r.id = ANY(%(ids)s::uuid[]) AND r.id = l.id AND (r.status = 'running') IS TRUE
  AND r.lease_token = l.token
  AND r.lease_generation = l.gen
RETURNING r.id

-- name: set_external_id
UPDATE run_log SET external_id = %(external_id)s
WHERE id = %(id)s::uuid AND (status = 'running') IS TRUE AND lease_token = %(token)s::uuid
  AND lease_generation = %(gen)s
  AND lease_expires_at > coalesce(%(now)s::timestamptz, clock_timestamp())
RETURNING id

-- name: set_external_ids
-- By primary key, as renew; each row fenced on its own lease, as set_external_id.
UPDATE run_log r SET external_id = w.external_id
FROM unnest(%(ids)s::uuid[], %(tokens)s::uuid[], %(gens)s::bigint[], %(external_ids)s::text[])
    AS w(id, token, gen, external_id)
WHERE r.id = ANY(%(ids)s::uuid[]) AND r.id = w.id AND (r.status = 'running') IS TRUE
  AND r.lease_token = w.token
  AND r.lease_generation = w.gen
  AND r.lease_expires_at > coalesce(%(now)s::timestamptz, clock_timestamp())
RETURNING r.id

-- name: finish
WITH n AS (SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now)
UPDATE run_log r SET
    status = %(status)s,
    end_reason = %(end_reason)s,
    exit_code = %(exit_code)s,
    error_code = %(error_code)s,
    log_tail = %(log_tail)s,
    -- The rule of core.accept_rules.finish_note, here to be atomic with the update.
    note = CASE WHEN %(note)s::text IS NOT NULL THEN %(note)s
                WHEN r.error_code IS NOT NULL THEN NULL ELSE r.note END,
    -- When the run ended (the save may have waited out an outage), never before it started.
    finished_at = greatest(r.started_at, n.now - make_interval(secs => %(ago)s::float8)),
    external_id = coalesce(%(external_id)s, r.external_id)
FROM n
WHERE r.id = %(id)s::uuid AND (r.status = 'running') IS TRUE AND r.lease_token = %(token)s::uuid
  AND r.lease_generation = %(gen)s AND (r.lease_expires_at > n.now) IS TRUE
RETURNING r.*

-- name: finish_many
-- finish for a batch in one statement; rows whose fence fails are simply not returned. Returns
-- what FinishedRun holds, not the whole row. The batch comes as one JSON array of objects: one
-- json.dumps in C, where ten arrays cost the launcher a Python loop per element to encode.
WITH n AS (SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now),
v AS (
    SELECT * FROM jsonb_to_recordset(%(batch)s::jsonb) AS v(
        id uuid, token uuid, gen bigint, status text, end_reason text, exit_code int,
        error_code text, log_tail text, note text, external_id text, ago float8
    )
)
UPDATE run_log r SET
    status = v.status,
    end_reason = v.end_reason,
    exit_code = v.exit_code,
    error_code = v.error_code,
    log_tail = v.log_tail,
    note = CASE WHEN v.note IS NOT NULL THEN v.note
                WHEN r.error_code IS NOT NULL THEN NULL ELSE r.note END,  -- core.accept_rules.finish_note
    finished_at = greatest(r.started_at, n.now - make_interval(secs => v.ago)),  -- as in finish
    external_id = coalesce(v.external_id, r.external_id)
FROM v, n
-- Each row is found by its primary key, whatever the table's statistics say: `r.id = ANY(...)`
-- makes the few ids an index condition, and the status and expiry tests are written `(...) IS
-- TRUE` (the same tests: status is NOT NULL, and a NULL expiry fails either way) so that the
-- planner cannot read run_log_running_lease_idx for them instead. That index keeps an entry for
-- every run finished since the last VACUUM (its old row version's), with the expiry still ahead
-- for those finished within the lease TTL: scanning it cost O(runs per second x TTL) per batch
-- under sustained load, where this costs O(batch). tests/conformance/test_claim_plan.py.
WHERE r.id = ANY(ARRAY(SELECT v.id FROM v)) AND r.id = v.id
  AND (r.status = 'running') IS TRUE AND r.lease_token = v.token
  AND r.lease_generation = v.gen AND (r.lease_expires_at > n.now) IS TRUE
RETURNING r.id::text AS id, r.status, r.end_reason,
    -- A run someone asked to cancel is never retried: its retry row is not written.
    r.cancel_requested_at IS NOT NULL AS cancel_requested

-- name: lease_still_valid
-- The commit-time fence of a multi-statement save (the row may already be final by now).
SELECT 1 AS ok FROM run_log
WHERE id = %(id)s::uuid AND lease_token = %(token)s::uuid AND lease_generation = %(gen)s
  AND lease_expires_at > coalesce(%(now)s::timestamptz, clock_timestamp())

-- name: release
WITH n AS (SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now),
upd AS (
    UPDATE run_log r SET
        status = 'queued',
        lease_owner = NULL,
        lease_token = NULL,
        lease_expires_at = NULL,
        not_before = n.now + make_interval(secs => %(retry_after)s::float8),
        started_at = NULL,
        deadline_at = NULL,
        error_code = %(error_code)s,
        note = %(note)s
    FROM n
    WHERE r.id = %(id)s::uuid AND (r.status = 'running') IS TRUE AND r.lease_token = %(token)s::uuid
      AND r.lease_generation = %(gen)s AND (r.lease_expires_at > n.now) IS TRUE
    RETURNING r.id
),
wake AS (SELECT pg_notify('runlane_wakeup', '') FROM upd)
SELECT upd.id, (SELECT count(*) FROM wake) AS woken FROM upd

-- name: finish_unleased
-- A leased running row must be finished through its lease.
WITH n AS (SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now)
UPDATE run_log r SET
    status = %(status)s,
    end_reason = %(end_reason)s,
    exit_code = %(exit_code)s,
    error_code = %(error_code)s,
    log_tail = %(log_tail)s,
    note = %(note)s,
    finished_at = n.now
FROM n
WHERE r.id = %(id)s::uuid AND (r.status = %(expected)s) IS TRUE
  AND (r.status <> 'running' OR r.lease_token IS NULL)
RETURNING r.*

-- name: retry_repairs_now
WITH n AS (SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now)
UPDATE run_log r SET not_before = n.now
FROM n
WHERE r.status = 'queued' AND r.error_code = %(error_code)s AND r.not_before > n.now
  AND r.job = ANY(%(jobs)s::text[])
RETURNING r.id

-- name: expire_queued
WITH n AS (SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now),
c AS (
    SELECT r.id FROM run_log r
    WHERE r.status = 'queued' AND r.queue_expires_at <= (SELECT now FROM n)
    ORDER BY r.queue_expires_at, r.id
    LIMIT %(limit)s
    FOR UPDATE OF r SKIP LOCKED
)
UPDATE run_log r SET status = 'skipped', end_reason = 'expired', finished_at = n.now
FROM n
-- By primary key, as claim_fast's update.
WHERE r.id = ANY(ARRAY(SELECT c.id FROM c)) AND (r.status = 'queued') IS TRUE
  AND (r.queue_expires_at <= n.now) IS TRUE
RETURNING r.*

-- name: sweep_orphans
-- Running past deadline + grace with nobody supervising: no lease (an SDK child whose process
-- died) or an expired one that no launcher able to run it has taken over.
WITH n AS (SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now),
c AS (
    SELECT r.id FROM run_log r
    WHERE r.status = 'running' AND r.deadline_at IS NOT NULL
      AND r.deadline_at < (SELECT now FROM n) - make_interval(secs => %(grace)s::float8)
      AND (r.lease_token IS NULL OR r.lease_expires_at < (SELECT now FROM n))
    ORDER BY r.deadline_at, r.id
    LIMIT %(limit)s
    FOR UPDATE OF r SKIP LOCKED
)
UPDATE run_log r SET status = 'timeout', end_reason = 'orphaned', error_code = 'orphaned',
    finished_at = n.now, note = %(note)s  -- core.accept_rules.ORPHANED_NOTE
FROM n
-- By primary key, as claim_fast's update.
WHERE r.id = ANY(ARRAY(SELECT c.id FROM c)) AND (r.status = 'running') IS TRUE
  AND (r.lease_token IS NULL OR r.lease_expires_at < n.now)
RETURNING r.*

-- name: cancel_queued
WITH n AS (SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now)
UPDATE run_log r SET status = 'cancelled', end_reason = 'cancelled', finished_at = n.now,
    note = %(note)s
FROM n
WHERE r.id = %(id)s::uuid AND (r.status = 'queued') IS TRUE
RETURNING r.*

-- name: cancel_running
-- Idempotent: a second request keeps the first request's time.
WITH n AS (SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now),
upd AS (
    UPDATE run_log r SET cancel_requested_at = coalesce(r.cancel_requested_at, n.now)
    FROM n
    WHERE r.id = %(id)s::uuid AND (r.status = 'running') IS TRUE
    RETURNING r.*
),
wake AS (SELECT pg_notify('runlane_cancel', upd.id::text) FROM upd)
SELECT upd.*, (SELECT count(*) FROM wake) AS woken FROM upd

-- name: cancel_requests
SELECT id FROM run_log
WHERE status = 'running' AND lease_owner = %(owner)s AND cancel_requested_at IS NOT NULL
ORDER BY id

-- name: run_ids_by_prefix
-- A short id's runs: a range on the primary key (operations.lookup), no row read.
SELECT id FROM run_log WHERE id BETWEEN %(lo)s::uuid AND %(hi)s::uuid ORDER BY id LIMIT %(limit)s

-- name: run_statuses
-- The status of each run of :ids (a JSON list of uuids): the bus's consumer settles a batch of
-- commands with one read, each a probe of the primary key.
SELECT id, status FROM run_log
WHERE id = ANY(ARRAY(SELECT jsonb_array_elements_text(%(ids)s::jsonb)::uuid))

-- name: get_run
SELECT * FROM run_log WHERE id = %(id)s::uuid

-- The run list (`list_runs`, `list_runs_page`) is composed by SqlStoreBase.list_runs from the
-- fixed texts below: the select, one `list_runs_where_<filter>` clause per filter that is set
-- (joined by AND, in a fixed order), then the order. Each shape of filters is then its own
-- statement text, which PostgreSQL plans with the index that shape needs (one text with
-- `(x IS NULL OR col = x)` for every filter gets a generic plan that walks the whole log).
-- Values are always bound, never written into the text. The basic view's select
-- (`view=basic`) is `RUN_LIST_BASIC_SELECT` in adapters/sql/base.py, the same in both dialects.
-- name: list_runs_select
SELECT * FROM run_log

-- name: list_runs_where_job
job = %(job)s::text

-- name: list_runs_where_status
status = %(status)s::text

-- name: list_runs_where_trigger
trigger = %(trigger)s::text

-- name: list_runs_where_requested_by
requested_by = %(requested_by)s::text

-- name: list_runs_where_parent_run_id
parent_run_id = %(parent_run_id)s::uuid

-- name: list_runs_where_chain_root_id
chain_root_id = %(chain_root_id)s::uuid

-- name: list_runs_where_retry_of
retry_of = %(retry_of)s::uuid

-- name: list_runs_where_since
queued_at >= %(since)s::timestamptz

-- name: list_runs_where_until
queued_at < %(until)s::timestamptz

-- The keyset position: a row comparison, which the (…, queued_at DESC, id DESC) indexes serve
-- as one range.
-- name: list_runs_where_before
(queued_at, id) < (%(before_at)s::timestamptz, %(before_id)s::uuid)

-- name: list_runs_order
ORDER BY queued_at DESC, id DESC
LIMIT %(limit)s

-- name: count_queued
SELECT count(*) AS n FROM run_log WHERE status = 'queued'

-- name: queued_by_executor
-- O(queued), for the metrics exporter: the claim's partial index holds only queued rows.
SELECT executor, count(*) AS n FROM run_log WHERE status = 'queued' GROUP BY executor

-- name: outbox_oldest_pending
-- The first unpublished row by id is the oldest: one probe of outbox_unpublished_idx.
SELECT created_at FROM outbox WHERE published_at IS NULL ORDER BY id LIMIT 1

-- name: running_by_launcher
SELECT coalesce(lease_owner, '') AS owner, executor, count(*) AS n
FROM run_log WHERE status = 'running'
GROUP BY 1, 2

-- name: set_override
INSERT INTO job_overrides (job, paused_until, reason, created_by, created_at)
VALUES (%(job)s, %(paused_until)s::timestamptz, %(reason)s, %(created_by)s,
        coalesce(%(now)s::timestamptz, clock_timestamp()))
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
VALUES (%(launcher_id)s, %(host)s, %(pid)s, %(version)s, %(started_at)s::timestamptz,
        coalesce(%(now)s::timestamptz, clock_timestamp()), %(queue_depth)s, %(running)s::jsonb,
        %(catalog_digest)s, %(catalog_loaded_at)s::timestamptz, %(catalog_jobs)s::jsonb,
        %(catalog_path)s, %(catalog_chains)s::jsonb, %(heartbeat_interval)s::float8, %(log_dir)s,
        %(bus_queue_depth)s, %(bus_dlq_depth)s)
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
WHERE beat_at < coalesce(%(now)s::timestamptz, clock_timestamp())
    - make_interval(secs => greatest(%(older_than)s, 10 * coalesce(heartbeat_interval, 0)))
RETURNING launcher_id

-- name: write_probe
-- Inside a transaction that is rolled back: fails when the database cannot be written.
INSERT INTO launcher_heartbeat (launcher_id, host, pid, version, started_at, beat_at, queue_depth, running)
VALUES (%(launcher_id)s, '', 0, '', clock_timestamp(), clock_timestamp(), 0, '{}'::jsonb)

-- --- triggers: schedule state, chain runs, events ------------------------------------------


-- name: advance_schedule
-- Monotonic: racing launchers can only move a schedule forward.
INSERT INTO schedule_state (schedule_key, last_slot, updated_at)
VALUES (%(schedule_key)s, %(last_slot)s, coalesce(%(now)s::timestamptz, clock_timestamp()))
ON CONFLICT (schedule_key) DO UPDATE SET
    last_slot = greatest(schedule_state.last_slot, excluded.last_slot),
    updated_at = excluded.updated_at

-- name: forget_schedules
DELETE FROM schedule_state WHERE schedule_key = ANY(%(schedule_keys)s::text[])

-- name: insert_chain_run
-- Any conflict: a scheduled chain run has a deterministic id as well as its dedupe key.
WITH n AS (SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now)
INSERT INTO chain_runs (
    id, chain, dedupe_key, trigger, requested_by, scheduled_for, status, end_reason,
    started_at, deadline_at, finished_at
)
SELECT %(id)s::uuid, %(chain)s, %(dedupe_key)s, %(trigger)s, %(requested_by)s,
       %(scheduled_for)s::timestamptz, %(status)s::text, %(end_reason)s, n.now,
       n.now + make_interval(secs => %(max_duration)s::float8),
       CASE WHEN %(status)s::text <> 'running' THEN n.now END
FROM n
ON CONFLICT DO NOTHING
RETURNING *


-- name: chain_run_ids_by_prefix
SELECT id FROM chain_runs WHERE id BETWEEN %(lo)s::uuid AND %(hi)s::uuid ORDER BY id LIMIT %(limit)s

-- name: get_chain_run
SELECT * FROM chain_runs WHERE id = %(id)s::uuid

-- name: active_chain_runs
-- One page, oldest first; the next page starts after the last (started_at, id) of this one.
SELECT * FROM chain_runs
WHERE status = 'running'
  AND (%(after_at)s::timestamptz IS NULL
       OR (started_at, id) > (%(after_at)s::timestamptz, %(after_id)s::uuid))
ORDER BY started_at, id
LIMIT %(limit)s

-- name: list_chain_runs
SELECT * FROM chain_runs
WHERE (%(chain)s::text IS NULL OR chain = %(chain)s::text)
ORDER BY started_at DESC, id DESC
LIMIT %(limit)s

-- name: mark_chain_overrun
UPDATE chain_runs SET overrun_at = coalesce(overrun_at, coalesce(%(now)s::timestamptz, clock_timestamp()))
WHERE id = %(id)s::uuid
RETURNING *

-- name: finish_chain_run
UPDATE chain_runs SET status = %(status)s, end_reason = %(end_reason)s,
    finished_at = coalesce(%(now)s::timestamptz, clock_timestamp())
WHERE id = %(id)s::uuid AND (status = 'running') IS TRUE
RETURNING *

-- name: insert_event
-- A new event, and (when `fact_source` is given and bus_config.facts is set) its fact on the
-- outbox in the same statement (docs/bus.md#facts): a CloudEvent under `cloudevent`, its data
-- under `data`. A repeated id inserts neither.
WITH ins AS (
    INSERT INTO events (id, key, data, occurred_at)
    VALUES (%(id)s, %(key)s, %(data)s::jsonb, coalesce(%(now)s::timestamptz, clock_timestamp()))
    ON CONFLICT (id) DO NOTHING
    RETURNING *
), fact AS (
    INSERT INTO outbox (topic, payload, created_at, msg_key)
    SELECT
        'event:' || ins.key,
        jsonb_build_object(
            'cloudevent', jsonb_strip_nulls(jsonb_build_object(
                'specversion', '1.0',
                'id', ins.id,
                'source', %(fact_source)s::text,
                'type', ins.key,
                'time', to_char(ins.occurred_at AT TIME ZONE 'UTC',
                                'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                'datacontenttype', 'application/json',
                'traceparent', %(fact_traceparent)s::text)),
            'data', ins.data),
        clock_timestamp(),
        'event:' || ins.id
    FROM ins
    WHERE %(fact_source)s::text IS NOT NULL AND EXISTS (SELECT 1 FROM bus_config WHERE facts)
)
SELECT * FROM ins


-- name: list_events
SELECT * FROM events
WHERE (%(key)s::text IS NULL OR key = %(key)s::text)
ORDER BY occurred_at DESC, id DESC
LIMIT %(limit)s

-- name: link_event_run
INSERT INTO event_runs (event_id, run_id, job, started)
VALUES (%(event_id)s, %(run_id)s::uuid, %(job)s, %(started)s)
ON CONFLICT (event_id, run_id) DO NOTHING


-- name: events_of_run
SELECT * FROM event_runs WHERE run_id = %(run_id)s::uuid ORDER BY event_id

-- --- the web UI: sessions, one-time login codes, the latest run of each job -------------------

-- name: latest_runs
-- The newest run of each job of :jobs (a JSON list), one probe of run_log_job_queued_idx each.
SELECT r.* FROM jsonb_array_elements_text(%(jobs)s::jsonb) AS j(job)
CROSS JOIN LATERAL (
    SELECT * FROM run_log WHERE run_log.job = j.job ORDER BY queued_at DESC, id DESC LIMIT 1
) AS r

-- name: insert_web_session
INSERT INTO web_sessions (id, token_name, created_at, expires_at, last_seen_at)
SELECT %(id)s, %(token_name)s, n.now, n.now + make_interval(secs => %(absolute)s), n.now
FROM (SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now) AS n
RETURNING *

-- name: web_session
-- A live session of a live token: not past its absolute end, seen within %(idle)s seconds,
-- its token neither revoked nor expired. The token's columns come prefixed with token_.
SELECT s.*, t.role AS token_role, t.jobs AS token_jobs,
       t.secret_hash AS token_secret_hash, t.prefix AS token_prefix,
       t.created_by AS token_created_by, t.created_at AS token_created_at,
       t.expires_at AS token_expires_at, t.revoked_at AS token_revoked_at,
       t.last_used_at AS token_last_used_at
FROM web_sessions AS s JOIN api_tokens AS t ON t.name = s.token_name,
     (SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now) AS n
WHERE s.id = %(id)s AND s.expires_at > n.now
  AND s.last_seen_at > n.now - make_interval(secs => %(idle)s)
  AND t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > n.now)

-- name: touch_web_session
UPDATE web_sessions SET last_seen_at = coalesce(%(now)s::timestamptz, clock_timestamp())
WHERE id = %(id)s AND last_seen_at < coalesce(%(now)s::timestamptz, clock_timestamp()) - make_interval(secs => %(seconds)s)

-- name: delete_web_session
DELETE FROM web_sessions WHERE id = %(id)s RETURNING id

-- name: prune_web_sessions
DELETE FROM web_sessions
WHERE expires_at <= coalesce(%(now)s::timestamptz, clock_timestamp()) OR last_seen_at <= coalesce(%(now)s::timestamptz, clock_timestamp()) - make_interval(secs => %(idle)s)
RETURNING id

-- name: prune_login_codes
DELETE FROM web_login_codes WHERE expires_at <= coalesce(%(now)s::timestamptz, clock_timestamp()) RETURNING id

-- name: insert_login_code
INSERT INTO web_login_codes (id, token_name, created_at, expires_at)
SELECT %(id)s, %(token_name)s, n.now, n.now + make_interval(secs => %(ttl)s)
FROM (SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now) AS n
RETURNING *

-- name: redeem_login_code
-- One redemption per code: the first caller sets used_at and gets the token's name.
UPDATE web_login_codes SET used_at = coalesce(%(now)s::timestamptz, clock_timestamp())
WHERE id = %(id)s AND used_at IS NULL AND expires_at > coalesce(%(now)s::timestamptz, clock_timestamp())
RETURNING token_name

-- name: count_tokens
SELECT count(*) AS n FROM api_tokens

-- name: insert_token
INSERT INTO api_tokens (name, role, jobs, secret_hash, prefix, created_by, created_at, expires_at)
VALUES (%(name)s, %(role)s, %(jobs)s::jsonb, %(secret_hash)s, %(prefix)s, %(created_by)s,
        coalesce(%(now)s::timestamptz, clock_timestamp()), %(expires_at)s::timestamptz)
ON CONFLICT (name) DO NOTHING
RETURNING *

-- name: token_by_hash
-- Through the UNIQUE index of secret_hash; a revoked or expired token reads as none.
SELECT * FROM api_tokens
WHERE secret_hash = %(secret_hash)s AND revoked_at IS NULL
  AND (expires_at IS NULL OR expires_at > coalesce(%(now)s::timestamptz, clock_timestamp()))

-- name: revoke_token
UPDATE api_tokens
SET revoked_at = coalesce(revoked_at, %(now)s::timestamptz, clock_timestamp())
WHERE name = %(name)s
RETURNING *

-- name: touch_token
UPDATE api_tokens SET last_used_at = coalesce(%(now)s::timestamptz, clock_timestamp())
WHERE name = %(name)s
  AND (last_used_at IS NULL OR last_used_at < coalesce(%(now)s::timestamptz, clock_timestamp())
                                                - make_interval(secs => %(seconds)s))

-- name: insert_audit
INSERT INTO audit_log (at, actor, action, target, outcome, remote, detail)
VALUES (coalesce(%(now)s::timestamptz, clock_timestamp()), %(actor)s, %(action)s, %(target)s,
        %(outcome)s, %(remote)s, %(detail)s)
RETURNING *

-- name: reserve_key
-- A row older than `seconds` is stale, and one still in flight for `abandoned_seconds` was left
-- by a process that died: either is taken over as if absent (never replayed).
INSERT INTO idempotency_keys (owner, key, fingerprint, created_at, reservation)
VALUES (%(owner)s, %(key)s, %(fingerprint)s, coalesce(%(now)s::timestamptz, clock_timestamp()),
        %(reservation)s)
ON CONFLICT (owner, key) DO UPDATE SET
    fingerprint = excluded.fingerprint,
    created_at = excluded.created_at,
    reservation = excluded.reservation,
    status = NULL,
    body = NULL
WHERE idempotency_keys.created_at < excluded.created_at - make_interval(secs => %(seconds)s)
   OR (idempotency_keys.status IS NULL
       AND idempotency_keys.created_at
           < excluded.created_at - make_interval(secs => %(abandoned_seconds)s))
RETURNING owner

-- name: complete_key
-- Only while the key is still this request's reservation, in flight: one slower than the
-- takeover window may find it another request's now.
UPDATE idempotency_keys SET status = %(status)s, body = %(body)s::jsonb
WHERE owner = %(owner)s AND key = %(key)s AND status IS NULL AND reservation = %(reservation)s
RETURNING owner

-- name: prune_keys
DELETE FROM idempotency_keys
WHERE created_at < coalesce(%(now)s::timestamptz, clock_timestamp())
                   - make_interval(secs => %(seconds)s)
RETURNING owner

-- name: audit
SELECT * FROM audit_log
WHERE (%(before)s::bigint IS NULL OR id < %(before)s::bigint)
ORDER BY id DESC
LIMIT %(limit)s


-- name: outbox_lease
-- The relay's next batch (docs/bus.md#relay): the oldest rows nobody holds a live lease on, each
-- the oldest unpublished row of its key (one run's messages stay in order), leased to this
-- relay. SKIP LOCKED: relays of several launchers never wait for each other's batches.
WITH n AS (SELECT clock_timestamp() AS now),
picked AS (
    SELECT o.id FROM outbox o
    WHERE o.published_at IS NULL
      AND (o.leased_until IS NULL OR o.leased_until < (SELECT now FROM n))
      AND (o.msg_key IS NULL OR NOT EXISTS (
          SELECT 1 FROM outbox p
          WHERE p.msg_key = o.msg_key AND p.id < o.id AND p.published_at IS NULL))
    ORDER BY o.id
    LIMIT %(limit)s
    FOR UPDATE OF o SKIP LOCKED
)
UPDATE outbox o
SET leased_by = %(owner)s, leased_until = n.now + make_interval(secs => %(lease_seconds)s::float8)
FROM picked, n
WHERE o.id = picked.id
RETURNING o.id, o.topic, o.payload::text AS payload, o.created_at, o.msg_key

-- name: outbox_mark_sent
-- Rows the broker confirmed: published (whoever's lease it was: a confirm is a confirm).
UPDATE outbox SET published_at = clock_timestamp(), leased_by = NULL, leased_until = NULL
WHERE id IN (SELECT value::bigint FROM jsonb_array_elements_text(%(ids)s::jsonb) AS value)
  AND published_at IS NULL

-- name: outbox_release
-- Rows this relay leased but could not publish: free for the next attempt at once.
UPDATE outbox SET leased_by = NULL, leased_until = NULL
WHERE id IN (SELECT value::bigint FROM jsonb_array_elements_text(%(ids)s::jsonb) AS value)
  AND leased_by = %(owner)s AND published_at IS NULL

-- name: outbox_prune_returning
-- Published rows older than the keep window, a bounded batch per call.
DELETE FROM outbox WHERE id IN (
    SELECT id FROM outbox
    WHERE published_at IS NOT NULL
      AND published_at < clock_timestamp() - make_interval(secs => %(keep_seconds)s::float8)
    LIMIT %(limit)s
)
RETURNING id

-- name: outbox_pending_count
SELECT count(*) AS n FROM outbox WHERE published_at IS NULL

-- name: insert_outbox_fact
INSERT INTO outbox (topic, payload, created_at, msg_key)
VALUES (%(topic)s, %(payload)s::jsonb, clock_timestamp(), %(key)s)

-- name: set_bus_facts
-- Whether run state changes write facts to the outbox (the RabbitMQ bus's launchers: yes).
-- PostgreSQL's store then runs sync_facts_triggers in the same transaction.
INSERT INTO bus_config (id, facts) VALUES (1, %(facts)s)
ON CONFLICT (id) DO UPDATE SET facts = excluded.facts

-- name: sync_facts_triggers
-- run_log's facts triggers enabled or disabled as bus_config.facts says (migration 0013).
SELECT runlane_sync_facts_triggers()
