-- 0005: each launcher's heartbeat also says where its inline runs write their log files.
-- log_dir: the absolute directory (on the launcher's host) its inline executor writes to, so
-- `runlane logs` run from another directory (RUNLANE_LOG_DIR is relative by default) finds the
-- log file of a run that launcher claimed. NULL for rows written by a runlane older than this.
ALTER TABLE launcher_heartbeat ADD COLUMN log_dir TEXT;
