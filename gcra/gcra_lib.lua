-- allot GCRA: the part shared by the single-key and the composite script.
-- gcra/doc.go states the math; gcra.DecideMicros and gcra.DecideAllMicros are
-- the exact Go twins of these scripts (invariant I1): every function below
-- mirrors one in gcra/gcra.go, operation for operation. All values are whole
-- microseconds held in Lua doubles, exact below 2^53.
--
-- A key holds "tat:T:B": its theoretical arrival time and the emission
-- interval and burst it was written under. A plain number (as older scripts
-- wrote) is read as a TAT under the current limit.

local MAX_WINDOW = 2251799813685248 -- 2^51 µs, gcra.MaxWindow
local EXACT = 9007199254740992 -- 2^53

-- whole reads ARGV[i] as a whole number in [lo, hi], or returns nil and an
-- error reply that names the argument.
local function whole(i, name, lo, hi)
  local v = tonumber(ARGV[i])
  if v == nil or v ~= v or v ~= math.floor(v) or v < lo or v > hi then
    return nil, redis.error_reply(string.format(
      'ERR allot: ARGV[%d] (%s) must be a whole number in [%d, %d], got %s',
      i, name, lo, hi, tostring(ARGV[i])))
  end
  return v
end

-- pair reads the pair (T, B) at ARGV[i] and ARGV[i+1], validated as
-- gcra.Limit.Validate does: T, B, or nil, nil and an error reply.
local function pair(i)
  local T, B, err
  T, err = whole(i, 'T', 1, MAX_WINDOW)
  if not T then return nil, nil, err end
  B, err = whole(i + 1, 'B', 1, MAX_WINDOW)
  if not B then return nil, nil, err end
  if T * B > MAX_WINDOW then
    return nil, nil, redis.error_reply(string.format(
      'ERR allot: ARGV[%d]*ARGV[%d] (T*B) must be at most %d', i, i + 1, MAX_WINDOW))
  end
  return T, B
end

-- limit reads the triple (T, B, cost) starting at ARGV[i], validated as
-- gcra.Limit.Validate and gcra.Limit.CheckCost do.
local function limit(i)
  local T, B, err = pair(i)
  if not T then return nil, err end
  local cost
  cost, err = whole(i + 2, 'cost', 1, B)
  if not cost then return nil, err end
  return {T, B, cost}
end

-- clock is the only source of time: the Redis server's TIME, in µs.
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- load returns the state {tat, T, B} stored at key (tat 0: no key), as
-- gcra.State, or nil and an error reply for a value that is not a state.
local function load(key, T, B)
  local v = redis.call('GET', key)
  if not v then return {0, T, B} end
  local a, b, c = string.match(v, '^(%d+):(%d+):(%d+)$')
  if a then
    local tat, ot, ob = tonumber(a), tonumber(b), tonumber(c)
    if tat < EXACT and ot >= 1 and ob >= 1 and ot * ob <= MAX_WINDOW then
      return {tat, ot, ob}
    end
  else
    local tat = tonumber(v)
    if tat and tat == math.floor(tat) and tat > -EXACT and tat < EXACT then
      return {tat, T, B}
    end
  end
  return nil, redis.error_reply('ERR allot: key ' .. key .. ' does not hold a GCRA state')
end

-- restate is gcra.Convert: st restated under (T, B) at now, minting no unit.
local function restate(st, now, T, B)
  if st[1] == 0 or (st[2] == T and st[3] == B) then return st end
  local tat = st[1]
  if tat < now then tat = now end
  local x = (B - st[3]) * st[2] + (tat - now)
  if x <= 0 then return {now, T, B} end
  return {now + math.ceil((x / st[2]) * T), T, B}
end

-- decide is gcra.DecideMicros. It returns the state after the decision, the
-- reply {allowed, retry_after, remaining, reset_after}, whether the state
-- must be written, and the state restated under (T, B) with no cost charged.
local function decide(st, now, T, B, cost)
  local converted = st[1] ~= 0 and (st[2] ~= T or st[3] ~= B)
  st = restate(st, now, T, B)
  local tat = now
  if st[1] ~= 0 and st[1] > now then tat = st[1] end
  local bt = B * T
  local new_tat = tat + T * cost
  local allow_at = new_tat - bt
  if allow_at > now then
    local rem = math.floor((now - (tat - bt)) / T)
    if rem < 0 then rem = 0 end
    return st, {0, allow_at - now, rem, tat - now}, converted, st
  end
  return {new_tat, T, B}, {1, 0, math.floor((now - allow_at) / T), new_tat - now}, true, st
end

-- store writes st at key with the expiry of gcra.Expiry, so a key vanishes
-- once its TAT is in the past.
local function store(key, st, now)
  local px = 1
  local d = st[1] - now
  if d > 0 then px = math.floor((d + 999) / 1000) + 1 end
  redis.call('SET', key, string.format('%d:%d:%d', st[1], st[2], st[3]), 'PX', string.format('%d', px))
end

-- decide_all is the composite decision, as gcra.DecideAllMicros, of the n
-- keys KEYS[ko+1..ko+n] with the triples (T, B, cost) from ARGV[ao+1] on,
-- at now; it writes what the decision writes. It returns the reply
-- {allowed, retry_after, remaining, reset_after, limiting} and the states
-- written (when allowed), or nil and an error reply.
local function decide_all(ko, ao, n, now)
  local lims = {}
  for i = 1, n do
    local lim, err = limit(ao + 3 * i - 2)
    if not lim then return nil, err end
    lims[i] = lim
  end
  local allowed, limiting, retry, remaining, reset = true, 1, 0, 0, 0
  local next_states, restated, converted = {}, {}, {}
  for i = 1, n do
    local lim = lims[i]
    local st, err = load(KEYS[ko + i], lim[1], lim[2])
    if not st then return nil, err end
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
      store(KEYS[ko + i], next_states[i], now)
    elseif converted[i] then
      store(KEYS[ko + i], restated[i], now)
    end
  end
  if allowed then return {1, 0, remaining, reset, limiting}, next_states end
  return {0, retry, remaining, reset, limiting}, nil
end

-- settle is gcra.SettleMicros: st (loaded under (T, B)) settled from
-- reserved to actual units at now, r0 being the key's TAT right after the
-- reserving decision. It returns the new state and whether it must be
-- written.
local function settle(st, now, T, B, reserved, actual, r0)
  if actual == reserved then return st, false end
  local converted = st[1] ~= 0 and (st[2] ~= T or st[3] ~= B)
  if actual < reserved then
    -- A refund: only of what the reservation still holds (r0 − now),
    -- and not at all once the key was written under another limit.
    if converted or st[1] == 0 or st[1] <= now then return st, false end
    local back = (reserved - actual) * T
    if r0 - now < back then back = r0 - now end
    if back <= 0 then return st, false end
    local tat = st[1] - back
    if tat < now then tat = now end
    return {tat, T, B}, true
  end
  st = restate(st, now, T, B)
  local tat = now
  if st[1] ~= 0 and st[1] > now then tat = st[1] end
  tat = tat + (actual - reserved) * T
  if tat > now + MAX_WINDOW then tat = now + MAX_WINDOW end
  return {tat, T, B}, true
end
