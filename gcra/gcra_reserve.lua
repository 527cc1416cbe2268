
-- Decide all or nothing, as gcra.DecideAllMicros, and when allowed keep the
-- reservation: what it charged, and each key's TAT right after it (r0,
-- which bounds a later refund: gcra.SettleMicros).
-- KEYS[1] is the reservation, KEYS[2..N+1] the keys; ARGV[1] the
-- reservation's time to live in ms, ARGV[2] its record (kept as
-- ARGV[2] .. '|' .. the r0 of each key, comma-separated), then N triples
-- (T µs, B, cost). Returns what the composite script returns.
local n = #KEYS - 1
if n < 1 or #ARGV ~= 2 + 3 * n then
  return redis.error_reply(string.format(
    'ERR allot: want the ttl, the record and 3 ARGV (T, B, cost) per key: %d keys, %d ARGV', n, #ARGV))
end
local ttl, terr = whole(1, 'ttl_ms', 1, 86400000)
if not ttl then return terr end
local now = clock()
local reply, states = decide_all(1, 2, n, now)
if not reply then return states end
if reply[1] == 1 then
  local r0 = {}
  for i = 1, n do r0[i] = string.format('%d', states[i][1]) end
  redis.call('SET', KEYS[1], ARGV[2] .. '|' .. table.concat(r0, ','), 'PX', string.format('%d', ttl))
end
return reply
