-- 0010: the outbox relay (issue 19, docs/bus.md): a relay leases the rows it publishes (several
-- launchers relay at once, each its own rows), and `msg_key` (a run id) keeps the messages of
-- one run in order: a row waits while an older row of its key is unpublished.
ALTER TABLE outbox ADD COLUMN msg_key text;
ALTER TABLE outbox ADD COLUMN leased_by text;
ALTER TABLE outbox ADD COLUMN leased_until timestamptz;
CREATE INDEX outbox_unpublished_key_idx ON outbox (msg_key, id) WHERE published_at IS NULL;
CREATE INDEX outbox_published_idx ON outbox (published_at) WHERE published_at IS NOT NULL;
