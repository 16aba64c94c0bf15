-- 0013: the facts triggers on run_log (0010) fire only while `bus_config.facts` is set (the
-- RabbitMQ bus). On the database bus, the default, every run's insert, claim and finish fired
-- them for nothing: a queued after-trigger event and a PL/pgSQL call that found facts off, ~0.02
-- ms of the database's CPU a run (docs/performance.md, "Twenty-first session"). The function
-- still checks the flag.
--
-- runlane_sync_facts_triggers() enables or disables both triggers to match the flag. The store's
-- set_bus_facts writes the flag (with the caller's own rights) and calls it in the same
-- transaction: the flag's row lock orders the callers, so once each commits the triggers are as
-- the flag says. SECURITY DEFINER, so a launcher whose role does not own run_log (migrations run
-- by another role) can switch them; it takes no argument and only ever makes the triggers agree
-- with the flag. It alters run_log only when they differ: ALTER TABLE's lock waits for, and
-- briefly holds up, run_log's writers. Its search path is this schema, then pg_temp (a caller's
-- temporary tables never stand in for run_log or bus_config).
CREATE FUNCTION runlane_sync_facts_triggers() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    facts_on boolean;
BEGIN
    SELECT facts INTO facts_on FROM bus_config WHERE id = 1 FOR SHARE;
    facts_on := coalesce(facts_on, false);
    IF EXISTS (
        SELECT 1 FROM pg_catalog.pg_trigger
        WHERE tgrelid = 'run_log'::regclass
          AND tgname IN ('run_log_fact_insert', 'run_log_fact_update')
          AND (tgenabled IN ('O', 'A')) <> facts_on
    ) THEN
        IF facts_on THEN
            ALTER TABLE run_log ENABLE TRIGGER run_log_fact_insert;
            ALTER TABLE run_log ENABLE TRIGGER run_log_fact_update;
        ELSE
            ALTER TABLE run_log DISABLE TRIGGER run_log_fact_insert;
            ALTER TABLE run_log DISABLE TRIGGER run_log_fact_update;
        END IF;
    END IF;
END
$$;

DO $$
BEGIN
    EXECUTE format(
        'ALTER FUNCTION runlane_sync_facts_triggers() SET search_path = %I, pg_temp',
        current_schema()
    );
END
$$;

-- As the flag is now (no row: facts off).
SELECT runlane_sync_facts_triggers();
