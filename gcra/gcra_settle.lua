
-- Settle a reservation, as gcra.SettleMicros on each of its keys.
-- KEYS[1] is the reservation; KEYS[2..N+1] its keys. ARGV[1] is the
-- reservation's value as read (it is settled only if it still holds it),
-- ARGV[2] the actual cost, then N quadruples (T µs, B, reserved cost, r0:
-- the key's TAT right after the reserving decision), the i-th for
-- KEYS[i+1]. Returns 1 when settled, 0 when the reservation is gone (never
-- made, expired, settled already, or changed): then nothing is written.
local n = #KEYS - 1
if n < 1 or #ARGV ~= 2 + 4 * n then
  return redis.error_reply(string.format(
    'ERR allot: want the reservation, the actual cost and 4 ARGV (T, B, reserved, r0) per key: %d keys, %d ARGV', n, #ARGV))
end
local actual, aerr = whole(2, 'actual', 0, MAX_WINDOW)
if not actual then return aerr end
local lims = {}
for i = 1, n do
  local T, B, reserved, r0, err
  T, err = whole(4 * i - 1, 'T', 1, MAX_WINDOW)
  if not T then return err end
  B, err = whole(4 * i, 'B', 1, MAX_WINDOW)
  if not B then return err end
  reserved, err = whole(4 * i + 1, 'reserved', 1, B)
  if not reserved then return err end
  r0, err = whole(4 * i + 2, 'r0', 0, EXACT)
  if not r0 then return err end
  if T * B > MAX_WINDOW or (actual > reserved and (actual - reserved) * T > MAX_WINDOW) then
    return redis.error_reply(string.format('ERR allot: key %d: limit or actual out of range', i))
  end
  lims[i] = {T, B, reserved, r0}
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local now = clock()
local states = {}
for i = 1, n do
  local lim = lims[i]
  local st, err = load(KEYS[i + 1], lim[1], lim[2])
  if not st then return err end
  states[i] = st
end
redis.call('DEL', KEYS[1])
for i = 1, n do
  local lim = lims[i]
  local ns, write = settle(states[i], now, lim[1], lim[2], lim[3], actual, lim[4])
  if write then store(KEYS[i + 1], ns, now) end
end
return 1
