-- 0012: the run_failed rule reads only what it can alert on. It used to read every run finished
-- since its cursor (less a minute for late commits) through run_log_finished_idx: at a few
-- hundred runs a second that is more rows than one evaluation reads (20,000), so the cursor
-- stopped moving and new failures went unseen, and below that every run was read back once or
-- twice. Now the failures (the statuses it alerts on) have a partial index of their own, and a
-- job's last success is looked up for the few jobs that need it (an open incident, a failure
-- read); the index on every finished run had no other reader and goes.
DROP INDEX run_log_finished_idx;
CREATE INDEX run_log_alerting_idx ON run_log (finished_at, id)
    WHERE status IN ('failure', 'timeout', 'skipped');
CREATE INDEX run_log_job_success_idx ON run_log (job, finished_at, id) WHERE status = 'success';
