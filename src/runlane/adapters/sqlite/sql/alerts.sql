-- Named statements of the SQLite store's Incidents role (migration 0009), loaded next to
-- queries.sql. Times are the fixed-width UTC text of every other table; `:now` is the store's.

-- name: failed_since
-- INDEXED BY: the failures' partial index in finish order. Without statistics SQLite read every
-- failure ever logged through run_log_status_queued_idx and sorted them, at each evaluation.
SELECT * FROM run_log INDEXED BY run_log_alerting_idx
WHERE status IN ('failure', 'timeout', 'skipped')
  AND finished_at IS NOT NULL
  AND (finished_at > :after_at OR (finished_at = :after_at AND id > :after_id))
ORDER BY finished_at, id
LIMIT :limit

-- name: last_success
SELECT * FROM run_log
WHERE job = :job AND status = 'success'
  AND finished_at > :after_at AND finished_at <= :until
ORDER BY finished_at DESC, id DESC
LIMIT 1

-- name: alert_cursor
SELECT position FROM alert_cursors WHERE rule = :rule

-- name: advance_alert_cursor
INSERT INTO alert_cursors (rule, position, updated_at) VALUES (:rule, :position, :now)
ON CONFLICT (rule) DO UPDATE SET position = excluded.position, updated_at = excluded.updated_at
WHERE alert_cursors.position < excluded.position

-- name: record_incident
INSERT INTO incidents (
    id, rule, fingerprint, subject, level, state, title, detail, run_id, first_seen,
    last_seen, count
)
VALUES (:id, :rule, :fingerprint, :subject, :level, 'open', :title, :detail, :run_id,
        :seen_at, :seen_at, :count)
ON CONFLICT (rule, fingerprint) WHERE state = 'open' DO UPDATE SET
    count = incidents.count + excluded.count,
    last_seen = excluded.last_seen,
    level = excluded.level,
    detail = coalesce(excluded.detail, incidents.detail),
    run_id = coalesce(excluded.run_id, incidents.run_id)
WHERE incidents.last_seen < excluded.last_seen
RETURNING *

-- name: open_incident_of
SELECT * FROM incidents WHERE rule = :rule AND fingerprint = :fingerprint AND state = 'open'

-- name: resolve_incident
UPDATE incidents SET state = 'resolved', resolved_at = :now, resolution = :resolution
WHERE id = :id AND state = 'open'
RETURNING *

-- name: open_incidents
SELECT * FROM incidents WHERE state = 'open' ORDER BY first_seen, id

-- name: list_incidents
SELECT * FROM incidents
WHERE (:open_only = 0 OR state = 'open')
ORDER BY first_seen DESC, id DESC
LIMIT :limit

-- name: incidents_to_notify
SELECT * FROM incidents WHERE state = 'open'
UNION ALL
SELECT * FROM incidents WHERE state = 'resolved' AND resolved_at >= :since
ORDER BY first_seen, id

-- name: notices_to_notify
SELECT n.* FROM incident_notices n JOIN incidents i ON i.id = n.incident_id
WHERE i.state = 'open' OR (i.state = 'resolved' AND i.resolved_at >= :since)

-- name: notices_of_listed
SELECT n.* FROM incident_notices n
WHERE n.incident_id IN (
    SELECT id FROM incidents WHERE (:open_only = 0 OR state = 'open')
    ORDER BY first_seen DESC, id DESC LIMIT :limit
)

-- name: claim_notice
INSERT INTO incident_notices (incident_id, target, sent_state, claim_owner, claim_until)
VALUES (:incident_id, :target, 'none', :owner, :until)
ON CONFLICT (incident_id, target) DO UPDATE SET
    claim_owner = excluded.claim_owner,
    claim_until = excluded.claim_until
WHERE incident_notices.sent_state = :expect
  AND incident_notices.gave_up_at IS NULL
  AND (incident_notices.claim_until IS NULL OR incident_notices.claim_until <= :now)
  AND (incident_notices.next_attempt_at IS NULL OR incident_notices.next_attempt_at <= :now)
  AND (:sent_before IS NULL OR incident_notices.sent_at <= :sent_before)
RETURNING incident_id

-- name: notice_sent
UPDATE incident_notices SET
    sent_state = :sent, sent_at = :now, attempts = 0, next_attempt_at = NULL,
    last_error = NULL, claim_owner = NULL, claim_until = NULL
WHERE incident_id = :incident_id AND target = :target AND claim_owner = :owner
RETURNING incident_id

-- name: notice_failed
UPDATE incident_notices SET
    attempts = attempts + 1, next_attempt_at = :retry_at, last_error = :error,
    gave_up_at = CASE WHEN :give_up = 1 THEN :now END,
    claim_owner = NULL, claim_until = NULL
WHERE incident_id = :incident_id AND target = :target AND claim_owner = :owner
RETURNING incident_id

-- name: incident_notified
UPDATE incidents SET last_notified_at = :now WHERE id = :incident_id

-- name: target_ok
INSERT INTO alert_targets (target, last_ok_at, failures) VALUES (:target, :now, 0)
ON CONFLICT (target) DO UPDATE SET last_ok_at = excluded.last_ok_at, failures = 0

-- name: target_failed
INSERT INTO alert_targets (target, last_error_at, last_error, failures)
VALUES (:target, :now, :error, 1)
ON CONFLICT (target) DO UPDATE SET
    last_error_at = excluded.last_error_at,
    last_error = excluded.last_error,
    failures = alert_targets.failures + 1

-- name: pause_target
-- A 429's Retry-After: no launcher sends to the target before then (a later, shorter pause
-- does not cut an earlier, longer one short).
INSERT INTO alert_targets (target, paused_until) VALUES (:target, :until)
ON CONFLICT (target) DO UPDATE SET
    paused_until = max(coalesce(alert_targets.paused_until, excluded.paused_until), excluded.paused_until)

-- name: alert_targets
SELECT * FROM alert_targets ORDER BY target

-- name: open_incident_counts
SELECT rule, count(*) AS n FROM incidents WHERE state = 'open' GROUP BY rule ORDER BY rule

-- name: prune_notices
DELETE FROM incident_notices WHERE incident_id IN (
    SELECT id FROM incidents WHERE state = 'resolved' AND resolved_at < :since
)

-- name: prune_incidents
DELETE FROM incidents WHERE state = 'resolved' AND resolved_at < :since RETURNING id

-- name: overrun_chain_runs_ended
-- Chain runs that ran past max_duration and ended after the position, with no chain_overdue
-- incident yet (one incident per chain run, however often the window is read again).
SELECT c.* FROM chain_runs c
WHERE c.overrun_at IS NOT NULL AND c.status <> 'running'
  AND c.finished_at > :after_at
  AND NOT EXISTS (
      SELECT 1 FROM incidents i
      WHERE i.first_seen >= c.started_at AND i.rule = 'chain_overdue'
        AND i.fingerprint = 'chain_overdue:' || c.id
  )
ORDER BY c.finished_at, c.id
LIMIT :limit
