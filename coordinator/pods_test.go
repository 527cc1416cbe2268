package coordinator

import (
	"context"
	"math"
	"time"

	"github.com/allot-dev/allot/shares"
)

// tpod is a regional pod's protocol state driven by hand: its reports go
// straight to a Coordinator's Report, and it applies the answers.
type tpod struct {
	region, id string
	st         *shares.Pod
}

func newTPod(region, id string) *tpod {
	return &tpod{region: region, id: id, st: shares.NewPod(region, 50*time.Millisecond)}
}

// report sends the pod's report at now covering interval; with apply the
// answer reaches the pod.
func (p *tpod) report(c *Coordinator, now time.Time, interval time.Duration, usage map[string]shares.Usage, apply bool) (ReportAnswer, error) {
	term, applied := p.st.State()
	ans, err := c.Report(context.Background(), PodReport{
		Region: p.region, Pod: p.id, Interval: interval, Term: term, Applied: applied,
		Usage: usage, LivePods: 2, Held: p.st.Held(),
	})
	if err != nil || !apply {
		return ans, err
	}
	if ans.RegionRemoved {
		p.st.Removed()
	} else {
		p.st.Answered(now, ans.Answer, nil)
	}
	return ans, nil
}

// enforced is what the pod enforces for tenant at now (its own reading of
// budgets left out: it never raises anything).
func (p *tpod) enforced(now time.Time, tenant string) float64 {
	r, _, _ := p.st.Effective(now, tenant, shares.Ceiling{Rate: math.Inf(1), Burst: math.MaxInt64})
	return r
}
