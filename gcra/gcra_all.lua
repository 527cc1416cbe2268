
-- Composite, all or nothing, as gcra.DecideAllMicros.
-- KEYS[1..N]; ARGV = N triples (T µs, B, cost), the i-th for KEYS[i]
-- returns {allowed (0|1), retry_after_us, remaining, reset_after_us,
--          limiting (1-based index of the limiting key)}
local n = #KEYS
if n < 1 or #ARGV ~= 3 * n then
  return redis.error_reply(string.format(
    'ERR allot: want 3 ARGV (T, B, cost) per key: %d keys, %d ARGV', n, #ARGV))
end
local now = clock()
local reply, err = decide_all(0, 0, n, now)
if not reply then return err end
return reply
