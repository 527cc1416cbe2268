
-- Settle a reservation, as gcra.SettleMicros on each of its keys.
-- KEYS[1] is the reservation; KEYS[2..N+1] its keys. ARGV[1] is the
-- reservation's value as read (it is settled only if it still holds it),
-- ARGV[2] the actual cost, then N triples (T µs, B, reserved cost), the
-- i-th for KEYS[i+1]. Returns 1 when settled, 0 when the reservation is
-- gone (never made, expired, settled already, or changed): then nothing is
-- written.
local n = #KEYS - 1
if n < 1 or #ARGV ~= 2 + 3 * n then
  return redis.error_reply(string.format(
    'ERR allot: want the reservation, the actual cost and 3 ARGV (T, B, reserved) per key: %d keys, %d ARGV', n, #ARGV))
end
local actual, aerr = whole(2, 'actual', 0, MAX_WINDOW)
if not actual then return aerr end
local lims = {}
for i = 1, n do
  local lim, err = limit(3 * i)
  if not lim then return err end
  if actual > lim[3] and (actual - lim[3]) * lim[1] > MAX_WINDOW then
    return redis.error_reply(string.format('ERR allot: actual %d owes more than key %d can hold', actual, i))
  end
  lims[i] = lim
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
  local ns, write = settle(states[i], now, lim[1], lim[2], lim[3], actual)
  if write then store(KEYS[i + 1], ns, now) end
end
return 1
