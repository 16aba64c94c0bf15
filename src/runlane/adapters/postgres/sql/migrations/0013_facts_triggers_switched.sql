-- 0013: the facts triggers on run_log (0010) are switched with `bus_config.facts`: enabled while
-- facts are on (the RabbitMQ bus), disabled otherwise. On the database bus, the default, every
-- run's claim and finish fired them for nothing: a queued after-trigger event and a PL/pgSQL
-- call that found facts off, ~0.025 ms of the database's CPU a run of its ~0.14
-- (docs/performance.md, "Twenty-first session"). The function still checks the flag.
--
-- runlane_set_bus_facts(on) sets the flag and switches both triggers in the caller's
-- transaction, so the two never disagree once it commits. The triggers are altered only when
-- their state differs: ALTER TABLE takes a lock that waits for run_log's writers. SECURITY
-- DEFINER, with the search path it was created with: a launcher whose role does not own run_log
-- (migrations run by another role) can switch them too, and it does nothing else.
CREATE FUNCTION runlane_set_bus_facts(facts_on boolean) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    IF EXISTS (
        SELECT 1 FROM pg_trigger
        WHERE tgrelid = 'run_log'::regclass
          AND tgname IN ('run_log_fact_insert', 'run_log_fact_update')
          AND (tgenabled = 'D') = facts_on
    ) THEN
        IF facts_on THEN
            ALTER TABLE run_log ENABLE TRIGGER run_log_fact_insert;
            ALTER TABLE run_log ENABLE TRIGGER run_log_fact_update;
        ELSE
            ALTER TABLE run_log DISABLE TRIGGER run_log_fact_insert;
            ALTER TABLE run_log DISABLE TRIGGER run_log_fact_update;
        END IF;
    END IF;
    INSERT INTO bus_config (id, facts) VALUES (1, facts_on)
    ON CONFLICT (id) DO UPDATE SET facts = excluded.facts;
END
$$;

-- As the flag is now (no row: facts off).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM bus_config WHERE facts) THEN
        ALTER TABLE run_log DISABLE TRIGGER run_log_fact_insert;
        ALTER TABLE run_log DISABLE TRIGGER run_log_fact_update;
    END IF;
END
$$;
