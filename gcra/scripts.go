package gcra

import (
	_ "embed" // the Lua scripts are embedded
)

//go:embed gcra_lib.lua
var luaLib string

//go:embed gcra_one.lua
var luaOne string

//go:embed gcra_all.lua
var luaAll string

//go:embed gcra_settle.lua
var luaSettle string

//go:embed gcra_charge.lua
var luaCharge string

//go:embed gcra_reserve.lua
var luaReserve string

// SingleScript returns the Lua source of the single-key script. It keeps the
// seed's calling convention: KEYS[1] is the key, ARGV is T (µs), B and cost;
// it returns {allowed, retry_after_us, remaining, reset_after_us}. Time comes
// from Redis TIME. DecideMicros is its exact twin.
func SingleScript() string { return luaLib + luaOne }

// CompositeScript returns the Lua source of the composite script: KEYS[1..N]
// and N triples (T µs, B, cost) in ARGV, decided all or nothing as
// DecideAllMicros does. It returns {allowed, retry_after_us, remaining,
// reset_after_us, limiting}, limiting being the 1-based index of the
// limiting key. All keys must share a Redis Cluster slot.
func CompositeScript() string { return luaLib + luaAll }

// ReserveScript returns the Lua source of the reserve script: the composite
// decision of KEYS[2..N+1] (N triples (T µs, B, cost) from ARGV[3]) and,
// when allowed, the reservation kept at KEYS[1] for ARGV[1] ms: the record
// ARGV[2], then '|' and each key's TAT right after the decision,
// comma-separated. It returns what CompositeScript returns.
func ReserveScript() string { return luaLib + luaReserve }

// SettleScript returns the Lua source of the settle script: KEYS[1] is the
// reservation, KEYS[2..N+1] its keys; ARGV is the reservation's value as
// read, the actual cost, and N quadruples (T µs, B, reserved cost, the
// key's TAT right after the reserving decision). It settles
// each key as SettleMicros does and deletes the reservation, only if the
// reservation still holds that value, and returns 1; otherwise 0, writing
// nothing. Time comes from Redis TIME. All keys must share a Redis Cluster
// slot.
func SettleScript() string { return luaLib + luaSettle }

// ChargeScript returns the Lua source of the charge script: KEYS[1..N] and
// N triples (T µs, B, cost) in ARGV, each key charged as ChargeMicros does
// (never denied). It returns 1. Time comes from Redis TIME. All keys must
// share a Redis Cluster slot.
func ChargeScript() string { return luaLib + luaCharge }

//go:embed gcra_restate.lua
var luaRestate string

// RestateScript returns the Lua source of the restate script: KEYS[1..N]
// and N pairs (T µs, B) in ARGV, each key restated as RestateMicros does
// (a key under another limit is written converted; nothing is charged). It
// returns the number of keys written. Time comes from Redis TIME. All keys
// must share a Redis Cluster slot.
func RestateScript() string { return luaLib + luaRestate }

//go:embed gcra_check.lua
var luaCheck string

// CheckScript returns the Lua source of the check script: KEYS[1] the key,
// ARGV T (µs) and B; it returns what SingleScript returns for a request of
// cost 0 (allowed while the key is not past its limit) and writes nothing.
// Time comes from Redis TIME. CheckMicros is its exact twin.
func CheckScript() string { return luaLib + luaCheck }
