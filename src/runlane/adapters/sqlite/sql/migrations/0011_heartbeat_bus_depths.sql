-- 0011: each launcher's heartbeat also records the depths of the broker's run-command queues
-- (issue 19, docs/bus.md): the ready messages of job_runs and job_runs.dlq as the launcher last
-- read them, so `runlane status` shows them without talking to the broker (and a cluster need
-- not scrape RabbitMQ). NULL on the database bus, while the broker is unreachable, and in rows
-- written by a runlane older than this.
ALTER TABLE launcher_heartbeat ADD COLUMN bus_queue_depth INTEGER;
ALTER TABLE launcher_heartbeat ADD COLUMN bus_dlq_depth INTEGER;
