package regional

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/wait"
	"github.com/allot-dev/allot/policy"
	"github.com/allot-dev/allot/shares"
)

// A region's share of a valid budget may be slower than the budget and so
// rest longer than gcra's window (a tiny grant with a large burst): the
// decide path enforces it with its burst lowered to fit (gcra.Fit), and a
// share below one unit per window admits nothing; neither is an error (it
// was an HTTP 500).
func TestSlowShareDecides(t *testing.T) {
	p := unknownPod(t)
	ctx := context.Background()
	// 1/h with the largest burst gcra allows at that rate.
	if _, err := p.st.PutBudget(ctx, "t9", policy.Budget{Rate: "1/h", Burst: 625_499}, false, 0); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 10*time.Second, func() error {
		if te := p.s.view.tenant("t9"); te.budget.Burst != 625_499 {
			return errors.New("budget not mirrored yet")
		}
		return nil
	})
	grant := func(_ uint64, rate float64, burst int64) {
		testGrant(p.s.view, "t9", shares.Grant{Rate: rate, Burst: burst, FloorRate: rate, FloorBurst: burst})
	}
	for i, c := range []struct {
		name    string
		rate    float64
		burst   int64
		allowed bool
	}{
		{"a millionth of a unit per second, burst 600,000: burst lowered to 2,251", 1e-6, 600_000, true},
		{"below one unit per window", 1e-12, 600_000, false},
	} {
		grant(uint64(i+1), c.rate, c.burst)
		if r, b, leased := p.s.view.tenantEffective(time.Now(), p.s.view.tenant("t9")); !leased || r != c.rate || b != c.burst {
			t.Fatalf("%s: effective %v/s burst %d leased %v, want the grant", c.name, r, b, leased)
		}
		code, d, raw := postDecide(t, p, `{"descriptors":{"tenant":"t9"}}`)
		if code != 200 || d.Allowed != c.allowed || d.Limit != "tenant" {
			t.Errorf("%s: decide = %d %s, want 200 allowed=%v by tenant", c.name, code, raw, c.allowed)
		}
	}
}
