package regional

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/gcra/keys"
	"github.com/allot-dev/allot/shares"
)

// ErrSettleGone: the settle token names no reservation: it never did, it
// expired (Config.SettleTTL), or it was settled already. Nothing changed.
var ErrSettleGone = errors.New("settle token: unknown, expired or already settled; nothing changed")

// Settled is what a settle did, in units of the reservation's cost:
// Refunded are given back to every limit the decision charged, Charged are
// owed by each as debt.
type Settled struct {
	Reserved, Actual, Refunded, Charged int64
}

// Reserve decides a request like Decide, with cost an estimate (say a
// completion's max_tokens), and when the region's store allows it keeps,
// in the same step, what it charged for SettleTTL: the answer's SettleToken
// then settles it with the actual cost (Settle). No token comes with a
// denial, a decision made without the store (fallback), or a request that
// matches a leased or a shadow limit: their charges stand as they are.
func (s *Service) Reserve(ctx context.Context, d map[string]string, cost int64) (Decision, error) {
	return s.decideOne(ctx, d, cost, true)
}

// decideReserved decides p's enforced limits and keeps the reservation in
// one store call (Settler.DecideReserve), through the breaker and under the
// store timeout; a failure is a fallback decision, with no token.
func (s *Service) decideReserved(ctx context.Context, tenant string, p *plan) (Decision, *limitCache) {
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	id := base64.RawURLEncoding.EncodeToString(raw[:])
	if p.budget {
		id += settleBudgets(p) // the settle adjusts these budgets' reported usage
	}
	key, err := keys.SettleKey(tenant, id)
	if err != nil {
		return s.decide(ctx, p)
	}
	r := gcra.Reservation{Key: key, Reqs: requests(&p.enforced)}
	start := time.Now()
	cctx, cancel := context.WithDeadline(ctx, start.Add(s.cfg.StoreTimeout))
	defer cancel()
	var d gcra.Decision
	_, err = s.breaker.Execute(func() ([]gcra.Answer, error) {
		var err error
		d, err = s.settler.DecideReserve(cctx, r, s.cfg.SettleTTL)
		return nil, err
	})
	if reason := s.observeStore(start, err); reason != "" {
		return s.fallbackDecide(ctx, p.shard, &p.enforced, reason)
	}
	dec, lc := fromStore(d, p.enforced.at(d.Limiting))
	if dec.Allowed {
		dec.SettleToken = settleTokenPrefix + base64.RawURLEncoding.EncodeToString([]byte(tenant)) + "." + id
	}
	return dec, lc
}

// settleTokenPrefix opens every settle token (its format's version).
const settleTokenPrefix = "s1."

// parseSettleToken returns the tenant and reservation id of a token.
// settleBudgets is the suffix of a reservation's id that names the budgets
// its settle adjusts in reports: "~" before each budget's name in unpadded
// base64url ("" for the tenant's budget; base64url holds no '~').
func settleBudgets(p *plan) string {
	var b strings.Builder
	for _, id := range p.budgetIDs() {
		_, name := shares.SplitBudgetID(id)
		b.WriteByte('~')
		b.WriteString(base64.RawURLEncoding.EncodeToString([]byte(name)))
	}
	return b.String()
}

// settledBudgets returns the budget IDs a reservation's id names (see
// settleBudgets); an id ending in "b" and holding no '~' (the form of
// earlier releases) names the tenant's budget.
func settledBudgets(tenant, id string) []string {
	rnd, names, ok := strings.Cut(id, "~")
	if !ok {
		if strings.HasSuffix(rnd, "b") && len(rnd) == settleRandLen+1 {
			return []string{tenant}
		}
		return nil
	}
	parts := strings.Split(names, "~")
	out := make([]string, 0, len(parts))
	for _, enc := range parts {
		n, err := base64.RawURLEncoding.DecodeString(enc)
		if err != nil {
			continue // (not one of ours: the reservation was found, so only a forged id could)
		}
		out = append(out, shares.BudgetID(tenant, string(n)))
	}
	return out
}

// settleRandLen is the length of a reservation id's random part: 16 bytes
// in unpadded base64url.
const settleRandLen = 22

func parseSettleToken(tok string) (tenant, id string, err error) {
	rest, ok := strings.CutPrefix(tok, settleTokenPrefix)
	enc, id, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 || id == "" {
		return "", "", badRequest("token: not a settle token (want the settle_token of a reserved decision)")
	}
	t, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || len(t) == 0 {
		return "", "", badRequest("token: not a settle token (want the settle_token of a reserved decision)")
	}
	return string(t), id, nil
}

// Settle settles the reservation behind token with the actual cost: units
// the decision charged but did not use are given back to each limit it
// charged (never beyond full), units beyond its cost are owed by each as
// debt (later requests wait until it is paid). A token settles once;
// another settle of it, of an unknown token or of an expired one is
// ErrSettleGone, and a negative actual ErrBadRequest, with nothing changed.
// Settled units count in the tenant's reported usage.
func (s *Service) Settle(ctx context.Context, token string, actual int64) (Settled, error) {
	if actual < 0 {
		return Settled{}, badRequest("actual: %d: want a whole number of units ≥ 0", actual)
	}
	tenant, id, err := parseSettleToken(token)
	if err != nil {
		return Settled{}, err
	}
	if s.settler == nil {
		return Settled{}, fmt.Errorf("%w (this pod's store keeps no reservations)", ErrSettleGone)
	}
	key, err := keys.SettleKey(tenant, id)
	if err != nil {
		return Settled{}, badRequest("token: not a settle token (want the settle_token of a reserved decision)")
	}
	sctx, cancel := context.WithTimeout(ctx, s.cfg.StoreTimeout)
	defer cancel()
	got, err := s.settler.Settle(sctx, key, actual)
	switch {
	case errors.Is(err, gcra.ErrNoReservation):
		s.m.settles.WithLabelValues("gone").Inc()
		return Settled{}, ErrSettleGone
	case errors.Is(err, gcra.ErrActual):
		s.m.settles.WithLabelValues("bad").Inc()
		return Settled{}, badRequest("actual: %d: %v", actual, err)
	case err != nil:
		s.m.settles.WithLabelValues("failed").Inc()
		return Settled{}, fmt.Errorf("settle: %w", err)
	}
	out := Settled{Reserved: got.Reserved, Actual: got.Actual}
	switch {
	case got.Actual < got.Reserved:
		out.Refunded = got.Reserved - got.Actual
		s.m.settles.WithLabelValues("refunded").Inc()
	case got.Actual > got.Reserved:
		out.Charged = got.Actual - got.Reserved
		s.m.settles.WithLabelValues("charged").Inc()
	default:
		s.m.settles.WithLabelValues("exact").Inc()
	}
	if budgets := settledBudgets(tenant, id); len(budgets) > 0 && got.Actual != got.Reserved {
		if te := s.view.tenant(tenant); te != nil {
			if c := s.countsOf(te.shard); c != nil {
				for _, b := range budgets {
					c.adjust(b, got.Actual-got.Reserved)
				}
			}
		}
	}
	return out, nil
}

// Charge charges cost units already spent (a response's real cost, known
// after it) to every limit the request's descriptors match: past the burst
// if need be, never denied; later requests wait until the debt is paid.
// The answer is always allowed. A budget limit this region holds no usable
// share of, a shadow limit, and a decision without the store (it failed)
// are not charged; the cost counts in the tenant's reported usage all the
// same. Policies mark the requests that are charges (policy.Document
// Charges): the Envoy RLS server sends those here.
func (s *Service) Charge(ctx context.Context, d map[string]string, cost int64) (Decision, error) {
	if err := checkRequest(d, 1); err != nil {
		return Decision{}, err
	}
	if cost < 1 {
		return Decision{}, badRequest("cost: %d: want a whole number of units ≥ 1", cost)
	}
	tenant := d["tenant"]
	te := s.view.tenant(tenant)
	if te == nil {
		return Decision{}, ErrNotReady
	}
	var p plan
	if err := s.plan(&p, te, d, 1); err != nil { // (the keys and limits; the cost may exceed a burst)
		return Decision{}, err
	}
	if p.budget {
		if c := s.countsOf(p.shard); c != nil {
			for _, id := range p.budgetIDs() {
				c.add(id, cost, true)
			}
		}
	}
	var reqs []gcra.Request
	for _, l := range []*items{&p.enforced, &p.leased} {
		for i := range l.n {
			r := l.at(i).req
			r.Cost = cost
			reqs = append(reqs, r)
		}
	}
	if len(reqs) == 0 {
		s.m.charges.WithLabelValues("none").Inc()
		return Decision{Allowed: true}, nil
	}
	if err := gcra.ValidateCharges(reqs); err != nil {
		return Decision{}, badRequest("cost: %d: %v", cost, err)
	}
	if s.charger == nil {
		s.m.charges.WithLabelValues("failed").Inc()
		return Decision{Allowed: true, Fallback: true}, nil
	}
	sctx, cancel := context.WithTimeout(ctx, s.cfg.StoreTimeout)
	defer cancel()
	if err := s.charger.Charge(sctx, reqs); err != nil {
		s.m.charges.WithLabelValues("failed").Inc()
		s.log.Debug("charge failed: the cost is not charged", "tenant", tenant, "err", err)
		return Decision{Allowed: true, Fallback: true}, nil
	}
	s.m.charges.WithLabelValues("charged").Inc()
	return Decision{Allowed: true}, nil
}
