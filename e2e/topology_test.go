package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	allotv1 "github.com/allot-dev/allot/proto/allot/v1"
)

// shortTopology is the short suite's: one etcd, one coordinator, three
// regions of two pods. P = 1s, L = 5s, TTL = 2s.
func shortTopology() topology {
	return topology{
		Regions: []string{"us-east", "eu-west", "ap-south"}, PodsPerRegion: 2, Etcd: 1, Coordinators: 1,
		Interval: time.Second, Lease: 5 * time.Second, SessionTTL: 2 * time.Second, Drift: 500 * time.Millisecond,
	}
}

func TestTopology(t *testing.T) {
	requireDocker(t)
	c := startCluster(t, shortTopology())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, r := range c.regions {
		for _, p := range r.pods {
			d, err := p.lim.Decide(ctx, &allotv1.DecideRequest{Descriptors: map[string]string{"tenant": "skew"}, Cost: 1})
			if err != nil || d.Limit != "tenant" && !d.Allowed || d.Fallback {
				t.Fatalf("%s: Decide = %v, %v; want a decision from Redis", p.name, d, err)
			}
			if err := eventually(ctx, 20*time.Second, func(ctx context.Context) error {
				n, err := c.metric(ctx, p, "allot_live_pods", nil)
				if err == nil && n != 2 {
					err = fmt.Errorf("allot_live_pods = %v, want 2", n)
				}
				return err
			}); err != nil {
				t.Errorf("%s: %v", p.name, err)
			}
		}
	}
}
