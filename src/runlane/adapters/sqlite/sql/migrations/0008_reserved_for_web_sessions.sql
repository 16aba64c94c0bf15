-- A placeholder for migration 0008 (the web UI's sessions, on branch hui1), so that this branch's
-- migrations are numbered without a gap. The coordinator deletes this file when merging: hui1's
-- 0008_web_sessions.sql takes its place.
SELECT 1;
