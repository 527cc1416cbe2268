
-- Composite, all or nothing, as gcra.DecideAllMicros.
-- KEYS[1..N]; ARGV = N triples (T µs, B, cost), the i-th for KEYS[i]
-- returns {allowed (0|1), retry_after_us, remaining, reset_after_us,
--          limiting (1-based index of the limiting key)}
local n = #KEYS
if n < 1 or #ARGV ~= 3 * n then
  return redis.error_reply(string.format(
    'ERR allot: want 3 ARGV (T, B, cost) per key: %d keys, %d ARGV', n, #ARGV))
end
local lims = {}
for i = 1, n do
  local lim, err = limit(3 * i - 2)
  if not lim then return err end
  lims[i] = lim
end
local now = clock()
local allowed, limiting, retry, remaining, reset = true, 1, 0, 0, 0
local next_states, restated, converted = {}, {}, {}
for i = 1, n do
  local lim = lims[i]
  local st, err = load(KEYS[i], lim[1], lim[2])
  if not st then return err end
  local cv = st[1] ~= 0 and (st[2] ~= lim[1] or st[3] ~= lim[2])
  local ns, r, _, rs = decide(st, now, lim[1], lim[2], lim[3])
  next_states[i], restated[i], converted[i] = ns, rs, cv
  if r[1] == 0 then
    if allowed or r[2] > retry then
      limiting = i
      retry = r[2]
    end
    allowed = false
  elseif allowed and (i == 1 or r[3] < remaining) then
    limiting = i
  end
  if i == 1 or r[3] < remaining then remaining = r[3] end
  if i == 1 or r[4] > reset then reset = r[4] end
end
for i = 1, n do
  if allowed then
    store(KEYS[i], next_states[i], now)
  elseif converted[i] then
    store(KEYS[i], restated[i], now)
  end
end
if allowed then return {1, 0, remaining, reset, limiting} end
return {0, retry, remaining, reset, limiting}
