
-- Check a key without charging it, as gcra.CheckMicros: the decision of a
-- request of cost 0, allowed while the key is not past its limit.
-- KEYS[1] = key; ARGV = T (µs), B.
-- returns {allowed (0|1), retry_after_us, remaining, reset_after_us}.
-- Writes nothing.
if #KEYS ~= 1 then
  return redis.error_reply('ERR allot: want exactly 1 key, got ' .. #KEYS)
end
if #ARGV ~= 2 then
  return redis.error_reply('ERR allot: want 2 ARGV (T, B), got ' .. #ARGV)
end
local T, B, err = pair(1)
if not T then return err end
local now = clock()
local st
st, err = load(KEYS[1], T, B)
if not st then return err end
local _, reply = decide(st, now, T, B, 0)
return reply
