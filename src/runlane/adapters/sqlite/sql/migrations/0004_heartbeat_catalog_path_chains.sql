-- 0004: each launcher's heartbeat also says how often it beats, which file it loaded its catalog
-- from and the chains that catalog defines. heartbeat_interval: seconds between its beats (a
-- launcher is live for three of its own intervals, whatever the reader's setting). catalog_path: the absolute path the launcher read (on its own host);
-- catalog_chains: a JSON list of the chain names. The CLI then names the file a launcher really
-- read, and a chain run that its launcher's catalog lacks waits exactly as long as another live
-- launcher has the chain. NULL for rows written by a runlane older than this migration.
ALTER TABLE launcher_heartbeat ADD COLUMN heartbeat_interval REAL;
ALTER TABLE launcher_heartbeat ADD COLUMN catalog_path TEXT;
ALTER TABLE launcher_heartbeat ADD COLUMN catalog_chains TEXT;
