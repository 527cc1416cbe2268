
-- Single key, the seed's calling convention.
-- KEYS[1] = key; ARGV = T (µs), B, cost
-- returns {allowed (0|1), retry_after_us, remaining, reset_after_us}
if #KEYS ~= 1 then
  return redis.error_reply('ERR allot: want exactly 1 key, got ' .. #KEYS)
end
local lim, err = limit(1)
if not lim then return err end
local now = clock()
local st
st, err = load(KEYS[1], lim[1], lim[2])
if not st then return err end
local ns, reply, write = decide(st, now, lim[1], lim[2], lim[3])
if write then store(KEYS[1], ns, now) end
return reply
