-- Named statements of the PostgreSQL store's Incidents role (migration 0009), loaded next to
-- queries.sql. Every time is database time (`coalesce(now, clock_timestamp())`) unless pinned.

-- name: failed_since
SELECT * FROM run_log
WHERE status IN ('failure', 'timeout', 'skipped')
  AND finished_at IS NOT NULL
  AND (finished_at > %(after_at)s::timestamptz OR (finished_at = %(after_at)s::timestamptz AND id > %(after_id)s))
ORDER BY finished_at, id
LIMIT %(limit)s

-- name: last_success
SELECT * FROM run_log
WHERE job = %(job)s AND status = 'success'
  AND finished_at > %(after_at)s::timestamptz AND finished_at <= %(until)s::timestamptz
ORDER BY finished_at DESC, id DESC
LIMIT 1

-- name: alert_cursor
SELECT position FROM alert_cursors WHERE rule = %(rule)s

-- name: advance_alert_cursor
INSERT INTO alert_cursors (rule, position, updated_at) VALUES (%(rule)s, %(position)s::timestamptz, coalesce(%(now)s::timestamptz, clock_timestamp()))
ON CONFLICT (rule) DO UPDATE SET position = excluded.position, updated_at = excluded.updated_at
WHERE alert_cursors.position < excluded.position

-- name: record_incident
INSERT INTO incidents (
    id, rule, fingerprint, subject, level, state, title, detail, run_id, first_seen,
    last_seen, count
)
VALUES (%(id)s, %(rule)s, %(fingerprint)s, %(subject)s, %(level)s, 'open', %(title)s, %(detail)s, %(run_id)s,
        %(seen_at)s::timestamptz, %(seen_at)s::timestamptz, %(count)s)
ON CONFLICT (rule, fingerprint) WHERE state = 'open' DO UPDATE SET
    count = incidents.count + excluded.count,
    last_seen = excluded.last_seen,
    level = excluded.level,
    detail = coalesce(excluded.detail, incidents.detail),
    run_id = coalesce(excluded.run_id, incidents.run_id)
WHERE incidents.last_seen < excluded.last_seen
RETURNING *

-- name: open_incident_of
SELECT * FROM incidents WHERE rule = %(rule)s AND fingerprint = %(fingerprint)s AND state = 'open'

-- name: resolve_incident
UPDATE incidents SET state = 'resolved', resolved_at = coalesce(%(now)s::timestamptz, clock_timestamp()), resolution = %(resolution)s
WHERE id = %(id)s AND state = 'open'
RETURNING *

-- name: open_incidents
SELECT * FROM incidents WHERE state = 'open' ORDER BY first_seen, id

-- name: list_incidents
SELECT * FROM incidents
WHERE (NOT %(open_only)s::boolean OR state = 'open')
ORDER BY first_seen DESC, id DESC
LIMIT %(limit)s

-- name: incidents_to_notify
SELECT * FROM incidents WHERE state = 'open'
UNION ALL
SELECT * FROM incidents WHERE state = 'resolved' AND resolved_at >= coalesce(%(now)s::timestamptz, clock_timestamp()) - make_interval(secs => %(seconds)s)
ORDER BY first_seen, id

-- name: notices_to_notify
SELECT n.* FROM incident_notices n JOIN incidents i ON i.id = n.incident_id
WHERE i.state = 'open' OR (i.state = 'resolved' AND i.resolved_at >= coalesce(%(now)s::timestamptz, clock_timestamp()) - make_interval(secs => %(seconds)s))

-- name: notices_of_listed
SELECT n.* FROM incident_notices n
WHERE n.incident_id IN (
    SELECT id FROM incidents WHERE (NOT %(open_only)s::boolean OR state = 'open')
    ORDER BY first_seen DESC, id DESC LIMIT %(limit)s
)

-- name: claim_notice
INSERT INTO incident_notices (incident_id, target, sent_state, claim_owner, claim_until)
VALUES (%(incident_id)s, %(target)s, 'none', %(owner)s,
        coalesce(%(now)s::timestamptz, clock_timestamp()) + make_interval(secs => %(lease)s))
ON CONFLICT (incident_id, target) DO UPDATE SET
    claim_owner = excluded.claim_owner,
    claim_until = excluded.claim_until
WHERE incident_notices.sent_state = %(expect)s
  AND incident_notices.gave_up_at IS NULL
  AND (incident_notices.claim_until IS NULL OR incident_notices.claim_until <= coalesce(%(now)s::timestamptz, clock_timestamp()))
  AND (incident_notices.next_attempt_at IS NULL OR incident_notices.next_attempt_at <= coalesce(%(now)s::timestamptz, clock_timestamp()))
  AND (%(sent_before)s::timestamptz IS NULL OR incident_notices.sent_at <= %(sent_before)s::timestamptz)
RETURNING incident_id

-- name: notice_sent
UPDATE incident_notices SET
    sent_state = %(sent)s, sent_at = coalesce(%(now)s::timestamptz, clock_timestamp()), attempts = 0, next_attempt_at = NULL,
    last_error = NULL, claim_owner = NULL, claim_until = NULL
WHERE incident_id = %(incident_id)s AND target = %(target)s AND claim_owner = %(owner)s
RETURNING incident_id

-- name: notice_failed
UPDATE incident_notices SET
    attempts = attempts + 1, next_attempt_at = coalesce(%(now)s::timestamptz, clock_timestamp())
                      + make_interval(secs => %(retry_in)s::float8), last_error = %(error)s,
    gave_up_at = CASE WHEN %(give_up)s::boolean THEN coalesce(%(now)s::timestamptz, clock_timestamp()) END,
    claim_owner = NULL, claim_until = NULL
WHERE incident_id = %(incident_id)s AND target = %(target)s AND claim_owner = %(owner)s
RETURNING incident_id

-- name: incident_notified
UPDATE incidents SET last_notified_at = coalesce(%(now)s::timestamptz, clock_timestamp()) WHERE id = %(incident_id)s

-- name: target_ok
INSERT INTO alert_targets (target, last_ok_at, failures) VALUES (%(target)s, coalesce(%(now)s::timestamptz, clock_timestamp()), 0)
ON CONFLICT (target) DO UPDATE SET last_ok_at = excluded.last_ok_at, failures = 0

-- name: target_failed
INSERT INTO alert_targets (target, last_error_at, last_error, failures)
VALUES (%(target)s, coalesce(%(now)s::timestamptz, clock_timestamp()), %(error)s, 1)
ON CONFLICT (target) DO UPDATE SET
    last_error_at = excluded.last_error_at,
    last_error = excluded.last_error,
    failures = alert_targets.failures + 1

-- name: pause_target
-- A 429's Retry-After: no launcher sends to the target before then (a later, shorter pause
-- does not cut an earlier, longer one short).
INSERT INTO alert_targets (target, paused_until)
VALUES (%(target)s, coalesce(%(now)s::timestamptz, clock_timestamp()) + make_interval(secs => %(seconds)s::float8))
ON CONFLICT (target) DO UPDATE SET
    paused_until = greatest(alert_targets.paused_until, excluded.paused_until)

-- name: alert_targets
SELECT * FROM alert_targets ORDER BY target

-- name: open_incident_counts
SELECT rule, count(*) AS n FROM incidents WHERE state = 'open' GROUP BY rule ORDER BY rule

-- name: prune_notices
DELETE FROM incident_notices WHERE incident_id IN (
    SELECT id FROM incidents WHERE state = 'resolved' AND resolved_at < coalesce(%(now)s::timestamptz, clock_timestamp()) - make_interval(secs => %(seconds)s)
)

-- name: prune_incidents
DELETE FROM incidents WHERE state = 'resolved' AND resolved_at < coalesce(%(now)s::timestamptz, clock_timestamp()) - make_interval(secs => %(seconds)s) RETURNING id

-- name: overrun_chain_runs_ended
-- Chain runs that ran past max_duration and ended after the position, with no chain_overdue
-- incident yet (one incident per chain run, however often the window is read again).
SELECT c.* FROM chain_runs c
WHERE c.overrun_at IS NOT NULL AND c.status <> 'running'
  AND c.finished_at > %(after_at)s::timestamptz
  AND NOT EXISTS (
      SELECT 1 FROM incidents i
      WHERE i.first_seen >= c.started_at AND i.rule = 'chain_overdue'
        AND i.fingerprint = 'chain_overdue:' || c.id::text
  )
ORDER BY c.finished_at, c.id
LIMIT %(limit)s
