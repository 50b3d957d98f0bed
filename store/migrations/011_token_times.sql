-- Schema version 11: per-token timing. token_times holds the arrival time of every
-- streamed event that carried generated text, as unsigned varints of microseconds: the
-- first from the request's start, each later one from the event before it (see
-- store.EncodeTokenTimes). NULL for a non-streamed answer or an older turn.
ALTER TABLE turns ADD COLUMN token_times BLOB;
