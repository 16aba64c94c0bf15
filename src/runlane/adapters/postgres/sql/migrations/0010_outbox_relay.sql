-- 0010: the outbox relay (issue 19, docs/bus.md): a relay leases the rows it publishes (several
-- launchers relay at once, each its own rows), and `msg_key` (a run id) keeps the messages of
-- one run in order: a row waits while an older row of its key is unpublished.
ALTER TABLE outbox ADD COLUMN msg_key text;
ALTER TABLE outbox ADD COLUMN leased_by text;
ALTER TABLE outbox ADD COLUMN leased_until timestamptz;
CREATE INDEX outbox_unpublished_key_idx ON outbox (msg_key, id) WHERE published_at IS NULL;
CREATE INDEX outbox_published_idx ON outbox (published_at) WHERE published_at IS NOT NULL;

-- Facts (docs/bus.md#facts): with the RabbitMQ bus, every run state change writes an outbox
-- row in the transaction that makes it (`run.<job>.<status>` on job_events, a CloudEvent);
-- `bus_config.facts` is set by the launchers of that bus, so the database bus writes none.
CREATE TABLE bus_config (
    id    integer PRIMARY KEY CHECK (id = 1),
    facts boolean NOT NULL DEFAULT false
);

CREATE FUNCTION runlane_run_fact() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM bus_config WHERE facts) THEN
        INSERT INTO outbox (topic, payload, created_at, msg_key)
        VALUES (
            'event:run.' || NEW.job || '.' || NEW.status,
            jsonb_build_object(
                'cloudevent', jsonb_build_object(
                    'specversion', '1.0',
                    'id', NEW.id::text || ':' || NEW.status,
                    'source', 'runlane://run-log',
                    'type', 'runlane.run.' || NEW.status,
                    'subject', NEW.id::text,
                    'time', to_char(clock_timestamp() AT TIME ZONE 'UTC',
                                    'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                    'datacontenttype', 'application/json'),
                'data', jsonb_build_object(
                    'run_id', NEW.id, 'job', NEW.job, 'status', NEW.status,
                    'trigger', NEW.trigger, 'attempt', NEW.attempt,
                    'exit_code', NEW.exit_code, 'end_reason', NEW.end_reason)),
            clock_timestamp(),
            NEW.id::text);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER run_log_fact_insert AFTER INSERT ON run_log
    FOR EACH ROW EXECUTE FUNCTION runlane_run_fact();
CREATE TRIGGER run_log_fact_update AFTER UPDATE OF status ON run_log
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION runlane_run_fact();
