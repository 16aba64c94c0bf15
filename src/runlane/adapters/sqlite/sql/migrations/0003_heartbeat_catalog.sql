-- 0003: each launcher's heartbeat says which catalog it runs, so the CLI can tell when the
-- catalog file changed after a launcher loaded it (`runlane status`, `doctor`, `run`).
-- catalog_digest: "sha256:<hex>" of the loaded catalog's canonical JSON; catalog_loaded_at:
-- when the launcher took it; catalog_jobs: a JSON list of the job names it defines.
-- NULL for rows written by a runlane older than this migration (nothing to compare).
ALTER TABLE launcher_heartbeat ADD COLUMN catalog_digest TEXT;
ALTER TABLE launcher_heartbeat ADD COLUMN catalog_loaded_at TEXT;
ALTER TABLE launcher_heartbeat ADD COLUMN catalog_jobs TEXT;
