-- 0015: completing or releasing an Idempotency-Key is conditional on the reservation still being
-- the request's own: `reservation` is a random name each request gives its reservation (a
-- takeover of an abandoned one writes its own). A request slower than the takeover window no
-- longer overwrites or deletes the reservation of the request that took its key over. NULL in
-- rows reserved by a runlane older than this: its own process completes or releases them by
-- key as before, or they are taken over once abandoned.
ALTER TABLE idempotency_keys ADD COLUMN reservation text;
