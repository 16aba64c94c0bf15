-- 0013: a target that answered 429 is paused for every launcher, not only the one that was
-- told: `alert_targets.paused_until` holds the end of its Retry-After, and each launcher reads
-- it before sending to that target (docs/alerts.md, "Delivery, and several launchers"). NULL:
-- never paused, in rows written by a runlane older than this too.
ALTER TABLE alert_targets ADD COLUMN paused_until TEXT;

-- The chain_overdue rule also reads the chain runs that ran past max_duration and ended since
-- its last look (at the deadline a chain with no step running ends within a second, before an
-- evaluation sees it running late): a partial index of the overrun ones alone.
CREATE INDEX chain_runs_overrun_idx ON chain_runs (finished_at, id) WHERE overrun_at IS NOT NULL;
