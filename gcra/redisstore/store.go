package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/gcra"
)

// Store is a gcra.BatchStore on Redis. Build it with New.
type Store struct {
	c       redis.UniversalClient
	one     *redis.Script
	all     *redis.Script
	settle  *redis.Script
	charge  *redis.Script
	reserve *redis.Script
	restate *redis.Script
	check   *redis.Script
}

var _ gcra.BatchStore = (*Store)(nil)

// New returns a Store deciding through c, which may be a *redis.Client, a
// *redis.ClusterClient or any other UniversalClient. A *redis.Client,
// *redis.ClusterClient or *redis.Ring must have been built with
// ContextTimeoutEnabled, or New returns ErrContextTimeoutDisabled: without it
// go-redis ignores context deadlines on socket reads and a stalled Redis
// would cost each call the client's read timeout.
func New(c redis.UniversalClient) (*Store, error) {
	if c == nil {
		return nil, errors.New("redisstore: client is nil")
	}
	if !contextTimeoutEnabled(c) {
		return nil, ErrContextTimeoutDisabled
	}
	return &Store{
		c:       c,
		one:     redis.NewScript(gcra.SingleScript()),
		all:     redis.NewScript(gcra.CompositeScript()),
		settle:  redis.NewScript(gcra.SettleScript()),
		charge:  redis.NewScript(gcra.ChargeScript()),
		reserve: redis.NewScript(gcra.ReserveScript()),
		restate: redis.NewScript(gcra.RestateScript()),
		check:   redis.NewScript(gcra.CheckScript()),
	}, nil
}

func contextTimeoutEnabled(c redis.UniversalClient) bool {
	switch cc := c.(type) {
	case *redis.Client:
		return cc.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return cc.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return cc.Options().ContextTimeoutEnabled
	}
	return true
}

// Decide decides reqs in one round trip: one request with the single-key
// script, several with the composite script (all or nothing). Invalid
// requests return the error of gcra.ValidateRequests without calling Redis;
// a failed call returns an *Error.
func (s *Store) Decide(ctx context.Context, reqs []gcra.Request) (gcra.Decision, error) {
	if err := gcra.ValidateRequests(reqs); err != nil {
		return gcra.Decision{}, err
	}
	script := s.one
	if len(reqs) > 1 {
		script = s.all
	}
	keys, args := encode(reqs)
	v, err := script.Run(ctx, s.c, keys, args...).Result()
	if err != nil {
		return gcra.Decision{}, classify("decide", err)
	}
	d, err := decode(v, len(reqs))
	if err != nil {
		return gcra.Decision{}, classify("decide", err)
	}
	return d, nil
}

// DecideMany decides every element of batch, each as Decide would, in one
// pipeline (EVALSHA for all; those the server answers NOSCRIPT are sent
// again with EVAL in a second pipeline). It returns one Answer per element,
// in order; a failure of the whole exchange is every answer's error.
func (s *Store) DecideMany(ctx context.Context, batch [][]gcra.Request) []gcra.Answer {
	answers := make([]gcra.Answer, len(batch))
	cmds := make([]*redis.Cmd, len(batch))
	pipe := s.c.Pipeline()
	queued := 0
	for i, reqs := range batch {
		if err := gcra.ValidateRequests(reqs); err != nil {
			answers[i].Err = err
			continue
		}
		keys, args := encode(reqs)
		cmds[i] = s.script(len(reqs)).EvalSha(ctx, pipe, keys, args...)
		queued++
	}
	if queued == 0 {
		return answers
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error

	var again []int
	for i, c := range cmds {
		if c != nil && redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		pipe = s.c.Pipeline()
		for _, i := range again {
			keys, args := encode(batch[i])
			cmds[i] = s.script(len(batch[i])).Eval(ctx, pipe, keys, args...)
		}
		_, _ = pipe.Exec(ctx)
	}

	for i, c := range cmds {
		if c == nil {
			continue
		}
		v, err := c.Result()
		if err != nil {
			answers[i].Err = classify("decide many", err)
			continue
		}
		d, err := decode(v, len(batch[i]))
		if err != nil {
			answers[i].Err = classify("decide many", err)
			continue
		}
		answers[i].Decision = d
	}
	return answers
}

func (s *Store) script(n int) *redis.Script {
	if n > 1 {
		return s.all
	}
	return s.one
}

// encode returns the keys and the ARGV triples (T, B, cost) of reqs.
func encode(reqs []gcra.Request) ([]string, []any) {
	keys := make([]string, len(reqs))
	args := make([]any, 0, 3*len(reqs))
	for i := range reqs {
		keys[i] = reqs[i].Key
		args = append(args, reqs[i].Limit.T, reqs[i].Limit.Burst, reqs[i].Cost)
	}
	return keys, args
}

// decode checks and converts a script's reply: four integers for one key,
// five (the last the 1-based limiting index) for n > 1.
func decode(v any, n int) (gcra.Decision, error) {
	arr, ok := v.([]any)
	if !ok {
		return gcra.Decision{}, badReply(v, "not an array")
	}
	want := 4
	if n > 1 {
		want = 5
	}
	if len(arr) != want {
		return gcra.Decision{}, badReply(v, "wrong number of elements")
	}
	var x [5]int64
	for i, e := range arr {
		iv, ok := e.(int64)
		if !ok {
			return gcra.Decision{}, badReply(v, "element is not an integer")
		}
		if iv < 0 {
			return gcra.Decision{}, badReply(v, "negative element")
		}
		x[i] = iv
	}
	allowed, retry, remaining, reset := x[0], x[1], x[2], x[3]
	if allowed > 1 {
		return gcra.Decision{}, badReply(v, "allowed is neither 0 nor 1")
	}
	if allowed == 1 && retry != 0 {
		return gcra.Decision{}, badReply(v, "allowed with a retry-after")
	}
	if allowed == 0 && retry == 0 {
		return gcra.Decision{}, badReply(v, "denied without a retry-after")
	}
	limiting := 0
	if n > 1 {
		if x[4] < 1 || x[4] > int64(n) {
			return gcra.Decision{}, badReply(v, "limiting index out of range")
		}
		limiting = int(x[4] - 1)
	}
	return gcra.Decision{
		Result: gcra.Result{
			Allowed:    allowed == 1,
			Remaining:  remaining,
			RetryAfter: time.Duration(retry) * time.Microsecond,
			ResetAfter: time.Duration(reset) * time.Microsecond,
		},
		Limiting: limiting,
	}, nil
}

func badReply(v any, reason string) error {
	return &Error{Op: "decode", Kind: ErrBadReply, Err: &ReplyError{Reply: v, Reason: reason}}
}

var _ gcra.Settler = (*Store)(nil)

// reservation is a Reservation as kept in Redis (JSON): each key with the
// limit and cost it was charged.
type reservation struct {
	R []reservedKey `json:"r"`
}

type reservedKey struct {
	K string `json:"k"`
	T int64  `json:"t"`
	B int64  `json:"b"`
	C int64  `json:"c"`
}

// DecideReserve decides r.Reqs all or nothing, as Decide does, and when
// allowed keeps the reservation under r.Key for ttl, in one script run (its
// record holds each key's TAT right after the decision).
func (s *Store) DecideReserve(ctx context.Context, r gcra.Reservation, ttl time.Duration) (gcra.Decision, error) {
	if err := gcra.ValidateRequests(r.Reqs); err != nil {
		return gcra.Decision{}, err
	}
	if r.Key == "" || ttl < time.Millisecond || ttl > 24*time.Hour {
		return gcra.Decision{}, errors.New("redisstore: a reservation needs a key and a ttl of 1ms to 24h")
	}
	v := reservation{R: make([]reservedKey, len(r.Reqs))}
	for i, q := range r.Reqs {
		v.R[i] = reservedKey{K: q.Key, T: q.Limit.T, B: q.Limit.Burst, C: q.Cost}
	}
	rec, err := json.Marshal(v)
	if err != nil {
		return gcra.Decision{}, err
	}
	keys, args := encode(r.Reqs)
	keys = append([]string{r.Key}, keys...)
	args = append([]any{ttl.Milliseconds(), string(rec)}, args...)
	out, err := s.reserve.Run(ctx, s.c, keys, args...).Result()
	if err != nil {
		return gcra.Decision{}, classify("decide and reserve", err)
	}
	d, err := decode(out, max(2, len(r.Reqs))) // (always the composite's reply)
	if err != nil {
		return gcra.Decision{}, classify("decide and reserve", err)
	}
	if len(r.Reqs) == 1 {
		d.Limiting = 0
	}
	return d, nil
}

// parseReservation reads a kept reservation: its record and, after '|',
// each key's TAT right after the reserving decision.
func parseReservation(raw string) (reservation, []int64, error) {
	rec, tail, ok := strings.Cut(raw, "|")
	var v reservation
	if !ok || json.Unmarshal([]byte(rec), &v) != nil || len(v.R) == 0 {
		return v, nil, errors.New("not a reservation")
	}
	parts := strings.Split(tail, ",")
	if len(parts) != len(v.R) {
		return v, nil, errors.New("not a reservation")
	}
	r0 := make([]int64, len(parts))
	for i, p := range parts {
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil || n < 0 {
			return v, nil, errors.New("not a reservation")
		}
		r0[i] = n
	}
	return v, r0, nil
}

// Settle settles the reservation under key with actual, in one script run
// after reading it: if another settle took it meanwhile, or it expired,
// nothing changes and the error is gcra.ErrNoReservation.
func (s *Store) Settle(ctx context.Context, key string, actual int64) (gcra.Settled, error) {
	raw, err := s.c.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return gcra.Settled{}, gcra.ErrNoReservation
	}
	if err != nil {
		return gcra.Settled{}, classify("settle", err)
	}
	v, r0, err := parseReservation(raw)
	if err != nil {
		return gcra.Settled{}, fmt.Errorf("redisstore: %s does not hold a reservation", key)
	}
	keys := make([]string, 0, 1+len(v.R))
	args := make([]any, 0, 2+4*len(v.R))
	keys = append(keys, key)
	args = append(args, raw, actual)
	for i, r := range v.R {
		l := gcra.Limit{T: r.T, Burst: r.B}
		if err := l.Validate(); err != nil {
			return gcra.Settled{}, fmt.Errorf("redisstore: reservation %s: %w", key, err)
		}
		if err := l.CheckActual(r.C, actual); err != nil {
			return gcra.Settled{}, err
		}
		keys = append(keys, r.K)
		args = append(args, r.T, r.B, r.C, r0[i])
	}
	n, err := s.settle.Run(ctx, s.c, keys, args...).Int64()
	if err != nil {
		return gcra.Settled{}, classify("settle", err)
	}
	if n != 1 {
		return gcra.Settled{}, gcra.ErrNoReservation
	}
	return gcra.Settled{Reserved: v.R[0].C, Actual: actual}, nil
}

var _ gcra.Charger = (*Store)(nil)

// Charge charges each request's cost to its key in one script run (see
// gcra.ChargeMicros): never denied. Invalid requests return the error of
// gcra.ValidateCharges without calling Redis.
func (s *Store) Charge(ctx context.Context, reqs []gcra.Request) error {
	if err := gcra.ValidateCharges(reqs); err != nil {
		return err
	}
	keys, args := encode(reqs)
	if err := s.charge.Run(ctx, s.c, keys, args...).Err(); err != nil {
		return classify("charge", err)
	}
	return nil
}

var _ gcra.Restater = (*Store)(nil)

// Restate restates each request's key under its limit in one script run
// (see gcra.RestateMicros): keys under another limit are converted at
// Redis's instant, nothing is charged. The keys must share a Redis Cluster
// slot (one tenant's keys do). Invalid requests return the error of
// gcra.ValidateRestates without calling Redis.
func (s *Store) Restate(ctx context.Context, reqs []gcra.Request) error {
	if err := gcra.ValidateRestates(reqs); err != nil {
		return err
	}
	keys := make([]string, len(reqs))
	args := make([]any, 0, 2*len(reqs))
	for i := range reqs {
		keys[i] = reqs[i].Key
		args = append(args, reqs[i].Limit.T, reqs[i].Limit.Burst)
	}
	if err := s.restate.Run(ctx, s.c, keys, args...).Err(); err != nil {
		return classify("restate", err)
	}
	return nil
}

var _ gcra.Checker = (*Store)(nil)

// Check checks key against l without charging it, in one script run (see
// gcra.CheckMicros): nothing is written. An empty key or an invalid limit
// is refused without calling Redis.
func (s *Store) Check(ctx context.Context, key string, l gcra.Limit) (gcra.Result, error) {
	if key == "" {
		return gcra.Result{}, gcra.ErrKey
	}
	if err := l.Validate(); err != nil {
		return gcra.Result{}, err
	}
	v, err := s.check.Run(ctx, s.c, []string{key}, l.T, l.Burst).Result()
	if err != nil {
		return gcra.Result{}, classify("check", err)
	}
	d, err := decode(v, 1)
	if err != nil {
		return gcra.Result{}, err
	}
	return d.Result, nil
}
