-- 0007: the indexes of the run list's filters (`runlane runs`, GET /api/v1/runs), each in the
-- list's order (queued_at DESC, id DESC), so a page of any one filter, first or 10,000 rows
-- deep, reads its rows off one index range (a keyset position) instead of walking the whole log.
-- A filter without its own index (trigger, since/until) walks run_log_queued_at_idx; see
-- docs/performance.md for the figures and the insert cost each index adds.
CREATE INDEX run_log_job_queued_idx ON run_log (job, queued_at DESC, id DESC);
CREATE INDEX run_log_status_queued_idx ON run_log (status, queued_at DESC, id DESC);
-- Scheduled, chained and event runs have no requester: a partial index stays small.
CREATE INDEX run_log_requested_by_queued_idx ON run_log (requested_by, queued_at DESC, id DESC)
    WHERE requested_by IS NOT NULL;
