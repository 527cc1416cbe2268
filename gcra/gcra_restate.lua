
-- Restate keys under new limits without deciding, as gcra.RestateMicros on
-- each key: KEYS[1..N]; ARGV = N pairs (T µs, B), the i-th for KEYS[i]. A
-- key that exists under another limit is written restated (restate, at
-- Redis TIME); every other key is left alone. Returns the number of keys
-- written.
local n = #KEYS
if n < 1 or #ARGV ~= 2 * n then
  return redis.error_reply(string.format(
    'ERR allot: want 2 ARGV (T, B) per key: %d keys, %d ARGV', n, #ARGV))
end
local lims = {}
for i = 1, n do
  local T, B, err = pair(2 * i - 1)
  if not T then return err end
  lims[i] = {T, B}
end
local now = clock()
local states = {}
for i = 1, n do
  local st, err = load(KEYS[i], lims[i][1], lims[i][2])
  if not st then return err end
  states[i] = st
end
local written = 0
for i = 1, n do
  local st, T, B = states[i], lims[i][1], lims[i][2]
  if st[1] ~= 0 and (st[2] ~= T or st[3] ~= B) then
    store(KEYS[i], restate(st, now, T, B), now)
    written = written + 1
  end
end
return written
