
-- Charge a cost already spent, as gcra.ChargeMicros on each key: past the
-- burst if need be, never denied. KEYS[1..N]; ARGV = N triples (T µs, B,
-- cost), the i-th for KEYS[i], cost ≥ 1 with cost·T within MAX_WINDOW.
-- Returns 1.
local n = #KEYS
if n < 1 or #ARGV ~= 3 * n then
  return redis.error_reply(string.format(
    'ERR allot: want 3 ARGV (T, B, cost) per key: %d keys, %d ARGV', n, #ARGV))
end
local lims = {}
for i = 1, n do
  local T, B, err = pair(3 * i - 2)
  if not T then return err end
  local cost
  cost, err = whole(3 * i, 'cost', 1, MAX_WINDOW)
  if not cost then return err end
  if cost * T > MAX_WINDOW then
    return redis.error_reply(string.format('ERR allot: ARGV[%d] (cost) owes more than key %d can hold', 3 * i, i))
  end
  lims[i] = {T, B, cost}
end
local now = clock()
local states = {}
for i = 1, n do
  local st, err = load(KEYS[i], lims[i][1], lims[i][2])
  if not st then return err end
  states[i] = st
end
for i = 1, n do
  local lim = lims[i]
  local ns, write = settle(states[i], now, lim[1], lim[2], 0, lim[3], 0)
  if write then store(KEYS[i], ns, now) end
end
return 1
