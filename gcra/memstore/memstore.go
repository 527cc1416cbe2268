package memstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/allot-dev/allot/gcra"
)

// Config configures a Store.
type Config struct {
	// Shards is the number of independently locked maps, a power of two.
	// More shards mean less lock contention between keys. Default 64.
	Shards int
	// Clock returns the current time; it is read once per decision and per
	// sweep. Default time.Now.
	Clock func() time.Time
	// SweepInterval is how often Run drops expired keys. Default 10s.
	SweepInterval time.Duration
	// StartEmpty makes a key that does not exist start as if its whole
	// burst had just been spent: it admits at its rate from the first
	// request, never a burst on top of what another store (Redis, before it
	// failed) may have admitted.
	StartEmpty bool
}

// DefaultConfig returns 64 shards, the wall clock and a 10 s sweep.
func DefaultConfig() Config {
	return Config{Shards: 64, Clock: time.Now, SweepInterval: 10 * time.Second}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	if c.Shards < 1 || c.Shards&(c.Shards-1) != 0 {
		return fmt.Errorf("memstore: Shards = %d, want a power of two ≥ 1", c.Shards)
	}
	if c.Clock == nil {
		return errors.New("memstore: Clock is nil")
	}
	if c.SweepInterval <= 0 {
		return fmt.Errorf("memstore: SweepInterval = %v, want > 0", c.SweepInterval)
	}
	return nil
}

type entry struct {
	s       gcra.State
	expires int64 // µs; the key is gone from this instant on
}

type shard struct {
	mu sync.Mutex
	m  map[string]entry
	_  [48]byte // keep neighbouring shards' locks off one cache line
}

// Store is an in-memory gcra.BatchStore.
type Store struct {
	empty  bool
	clock  func() time.Time
	every  time.Duration
	seed   maphash.Seed
	mask   uint64
	shards []shard

	resMu      sync.Mutex
	res        map[string]reserved // reservations by key (reserve, then settle)
	resSweepAt int                 // sweep expired reservations when res reaches this size
}

// reserved is one kept reservation.
type reserved struct {
	reqs    []gcra.Request
	r0      []int64 // each key's TAT right after the reserving decision
	expires int64   // µs
}

var (
	_ gcra.BatchStore = (*Store)(nil)
	_ gcra.Settler    = (*Store)(nil)
	_ gcra.Charger    = (*Store)(nil)
	_ gcra.Restater   = (*Store)(nil)
	_ gcra.Checker    = (*Store)(nil)
)

// New returns an empty Store. It copies cfg.
func New(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Store{
		empty:  cfg.StartEmpty,
		clock:  cfg.Clock,
		every:  cfg.SweepInterval,
		seed:   maphash.MakeSeed(),
		mask:   uint64(cfg.Shards - 1),
		shards: make([]shard, cfg.Shards),
	}
	for i := range s.shards {
		s.shards[i].m = make(map[string]entry)
	}
	return s, nil
}

func (s *Store) shardOf(key string) int {
	return int(maphash.String(s.seed, key) & s.mask)
}

// get returns key's live state in sh (locked by the caller), dropping it if
// it has expired.
// start returns st, or with StartEmpty for a key that does not exist, the
// state of one whose burst was just spent under lim.
func (s *Store) start(st gcra.State, lim gcra.Limit, now int64) (gcra.State, bool) {
	if !s.empty || st.Exists() {
		return st, false
	}
	return gcra.State{TAT: now + lim.T*lim.Burst, T: lim.T, Burst: lim.Burst}, true
}

func (sh *shard) get(key string, now int64) gcra.State {
	e, ok := sh.m[key]
	if !ok {
		return gcra.State{}
	}
	if now >= e.expires {
		delete(sh.m, key)
		return gcra.State{}
	}
	return e.s
}

// put stores st for key. With StartEmpty a key is kept a whole burst's
// interval longer than it needs: a missing key starts empty, not rested, so
// dropping one at its TAT would deny a request that is due then.
func (s *Store) put(sh *shard, key string, st gcra.State, now int64) {
	exp := now + gcra.Expiry(st, now).Microseconds()
	if s.empty {
		exp += st.T * st.Burst
	}
	sh.m[key] = entry{s: st, expires: exp}
}

// Decide decides reqs at the clock's instant: one request as
// gcra.DecideMicros, several all or nothing as gcra.DecideAllMicros.
// Invalid requests return the error of gcra.ValidateRequests; a done ctx
// returns its error.
func (s *Store) Decide(ctx context.Context, reqs []gcra.Request) (gcra.Decision, error) {
	if err := ctx.Err(); err != nil {
		return gcra.Decision{}, err
	}
	if err := gcra.ValidateRequests(reqs); err != nil {
		return gcra.Decision{}, err
	}
	now := s.clock().UnixMicro()
	if len(reqs) == 1 {
		r := &reqs[0]
		sh := &s.shards[s.shardOf(r.Key)]
		sh.mu.Lock()
		st, fresh := s.start(sh.get(r.Key, now), r.Limit, now)
		ns, res, write := gcra.DecideMicros(st, now, r.Limit, r.Cost)
		switch {
		case write:
			s.put(sh, r.Key, ns, now)
		case fresh:
			s.put(sh, r.Key, st, now) // denied, but drained from now on
		}
		sh.mu.Unlock()
		return gcra.Decision{Result: res}, nil
	}
	d, _ := s.decideAll(reqs, now)
	return d, nil
}

// decideAll decides reqs all or nothing at now and returns the decision and,
// when allowed, the states written.
func (s *Store) decideAll(reqs []gcra.Request, now int64) (gcra.Decision, []gcra.State) {
	var ib, ob [4]int
	idx, locked := s.lockShards(reqs, ib[:], ob[:])
	defer s.unlockShards(locked)
	items := make([]gcra.Item, len(reqs))
	var fresh []bool
	for i := range reqs {
		st, f := s.start(s.shards[idx[i]].get(reqs[i].Key, now), reqs[i].Limit, now)
		if f {
			if fresh == nil {
				fresh = make([]bool, len(reqs))
			}
			fresh[i] = true
		}
		items[i] = gcra.Item{State: st, Limit: reqs[i].Limit, Cost: reqs[i].Cost}
	}
	out := gcra.DecideAllMicros(items, now)
	for i := range reqs {
		switch {
		case out.Write[i]:
			s.put(&s.shards[idx[i]], reqs[i].Key, out.States[i], now)
		case fresh != nil && fresh[i]:
			s.put(&s.shards[idx[i]], reqs[i].Key, items[i].State, now)
		}
	}
	d := gcra.Decision{Result: out.Result, Limiting: out.Limiting}
	if !out.Allowed {
		return d, nil
	}
	return d, out.States
}

// DecideMany decides each element of batch in order, as Decide would.
func (s *Store) DecideMany(ctx context.Context, batch [][]gcra.Request) []gcra.Answer {
	out := make([]gcra.Answer, len(batch))
	for i, reqs := range batch {
		out[i].Decision, out[i].Err = s.Decide(ctx, reqs)
	}
	return out
}

// Peek returns key's state as a decision at the clock's instant would see
// it, without changing anything; ok is false for a missing or expired key.
func (s *Store) Peek(key string) (st gcra.State, ok bool) {
	now := s.clock().UnixMicro()
	sh := &s.shards[s.shardOf(key)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, found := sh.m[key]
	if !found || now >= e.expires {
		return gcra.State{}, false
	}
	return e.s, true
}

// Len returns the number of keys held, expired ones not yet dropped
// included.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// Sweep drops every expired key and returns how many it dropped. It locks
// one shard at a time.
func (s *Store) Sweep() int {
	now := s.clock().UnixMicro()
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if now >= e.expires {
				delete(sh.m, k)
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// Run sweeps every Config.SweepInterval until ctx is done, then returns nil.
func (s *Store) Run(ctx context.Context) error {
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.Sweep()
		}
	}
}

// DecideReserve decides r.Reqs all or nothing and, when allowed, keeps the
// reservation for ttl with each key's TAT right after (see gcra.Settler).
func (s *Store) DecideReserve(ctx context.Context, r gcra.Reservation, ttl time.Duration) (gcra.Decision, error) {
	if err := ctx.Err(); err != nil {
		return gcra.Decision{}, err
	}
	if err := gcra.ValidateRequests(r.Reqs); err != nil {
		return gcra.Decision{}, err
	}
	if r.Key == "" || ttl <= 0 {
		return gcra.Decision{}, errors.New("memstore: a reservation needs a key and a positive ttl")
	}
	now := s.clock().UnixMicro()
	s.resMu.Lock()
	defer s.resMu.Unlock()
	d, states := s.decideAll(r.Reqs, now)
	if states == nil {
		return d, nil
	}
	if s.res == nil {
		s.res = map[string]reserved{}
	}
	if len(s.res) >= s.resSweepAt {
		for k, v := range s.res {
			if now >= v.expires {
				delete(s.res, k)
			}
		}
		s.resSweepAt = max(1024, 2*len(s.res)) // (amortised: a sweep per doubling)
	}
	r0 := make([]int64, len(states))
	for i := range states {
		r0[i] = states[i].TAT
	}
	s.res[r.Key] = reserved{reqs: append([]gcra.Request(nil), r.Reqs...), r0: r0, expires: now + ttl.Microseconds()}
	return d, nil
}

// Settle settles the reservation under key with actual, as
// gcra.SettleMicros on each of its keys, and forgets it (see gcra.Settler).
func (s *Store) Settle(ctx context.Context, key string, actual int64) (gcra.Settled, error) {
	if err := ctx.Err(); err != nil {
		return gcra.Settled{}, err
	}
	now := s.clock().UnixMicro()
	s.resMu.Lock()
	defer s.resMu.Unlock()
	r, ok := s.res[key]
	if !ok || now >= r.expires {
		delete(s.res, key)
		return gcra.Settled{}, gcra.ErrNoReservation
	}
	for _, q := range r.reqs {
		if err := q.Limit.CheckActual(q.Cost, actual); err != nil {
			return gcra.Settled{}, err
		}
	}
	delete(s.res, key)
	idx, locked := s.lockShards(r.reqs, nil, nil)
	defer s.unlockShards(locked)
	for i, q := range r.reqs {
		sh := &s.shards[idx[i]]
		st, _ := s.start(sh.get(q.Key, now), q.Limit, now)
		if ns, write := gcra.SettleMicros(st, now, q.Limit, q.Cost, actual, r.r0[i]); write {
			s.put(sh, q.Key, ns, now)
		}
	}
	return gcra.Settled{Reserved: r.reqs[0].Cost, Actual: actual}, nil
}

// Charge charges each request's cost to its key, all at one instant (see
// gcra.ChargeMicros): never denied.
func (s *Store) Charge(ctx context.Context, reqs []gcra.Request) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := gcra.ValidateCharges(reqs); err != nil {
		return err
	}
	now := s.clock().UnixMicro()
	idx, locked := s.lockShards(reqs, nil, nil)
	defer s.unlockShards(locked)
	for i, q := range reqs {
		sh := &s.shards[idx[i]]
		st, _ := s.start(sh.get(q.Key, now), q.Limit, now)
		if ns, write := gcra.ChargeMicros(st, now, q.Limit, q.Cost); write {
			s.put(sh, q.Key, ns, now)
		}
	}
	return nil
}

// Restate restates each request's key under its limit, all at one instant
// (see gcra.RestateMicros): nothing is charged, and a missing key stays
// missing.
func (s *Store) Restate(ctx context.Context, reqs []gcra.Request) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := gcra.ValidateRestates(reqs); err != nil {
		return err
	}
	now := s.clock().UnixMicro()
	idx, locked := s.lockShards(reqs, nil, nil)
	defer s.unlockShards(locked)
	for i, q := range reqs {
		sh := &s.shards[idx[i]]
		if ns, write := gcra.RestateMicros(sh.get(q.Key, now), now, q.Limit); write {
			s.put(sh, q.Key, ns, now)
		}
	}
	return nil
}

// Check checks key against l at the clock's instant without charging it
// (see gcra.CheckMicros); nothing changes.
func (s *Store) Check(ctx context.Context, key string, l gcra.Limit) (gcra.Result, error) {
	if err := ctx.Err(); err != nil {
		return gcra.Result{}, err
	}
	if key == "" {
		return gcra.Result{}, gcra.ErrKey
	}
	if err := l.Validate(); err != nil {
		return gcra.Result{}, err
	}
	now := s.clock().UnixMicro()
	sh := &s.shards[s.shardOf(key)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	st, _ := s.start(sh.get(key, now), l, now)
	return gcra.CheckMicros(st, now, l), nil
}

// lockShards locks the shards of reqs' keys, each once, in index order, and
// returns each request's shard and the shards locked (for unlockShards),
// in idx and order (reused when large enough: callers pass arrays on their
// stack).
func (s *Store) lockShards(reqs []gcra.Request, idx, order []int) ([]int, []int) {
	idx = idx[:0]
	for i := range reqs {
		idx = append(idx, s.shardOf(reqs[i].Key))
	}
	order = append(order[:0], idx...)
	sort.Ints(order)
	order = slices.Compact(order)
	for _, i := range order {
		s.shards[i].mu.Lock()
	}
	return idx, order
}

// unlockShards unlocks what lockShards locked.
func (s *Store) unlockShards(locked []int) {
	for _, i := range locked {
		s.shards[i].mu.Unlock()
	}
}
