package regional

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/gcra/redisstore"
	"github.com/allot-dev/allot/internal/etcdtest"
	"github.com/allot-dev/allot/internal/membership"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/wait"
)

// Two pods of one region see each other through memberlist; when one stops,
// the survivor's fallback share doubles (and nothing else changes). Only
// this pod reports to the leader, which counts one pod: a limit that is not
// a budget takes the larger count, gossip's.
func TestMembershipFallbackShare(t *testing.T) {
	rs := redistest.Start(t)
	etcd := etcdtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	member := func(name string, join []string) (*membership.Membership, context.CancelFunc, chan error) {
		mc := membership.DefaultConfig()
		mc.Region, mc.NodeName, mc.BindAddr, mc.Join = "us-east", name, "127.0.0.1:0", join
		m, err := membership.New(mc)
		if err != nil {
			t.Fatal(err)
		}
		mctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- m.Run(mctx) }()
		<-m.Ready()
		return m, stop, done
	}
	ma, stopA, doneA := member("a", nil)
	defer func() {
		stopA()
		if err := <-doneA; err != nil {
			t.Error(err)
		}
	}()
	_, stopB, doneB := member("b", []string{ma.Addr()})

	wait.Until(t, 10*time.Second, func() error {
		if n := ma.LivePods(); n != 2 {
			return fmt.Errorf("pod a sees %d pods", n)
		}
		return nil
	})
	opts := redistest.ClientOptions(rs.Addr)
	opts.MaxRetries = -1
	rc := redis.NewClient(opts)
	t.Cleanup(func() { _ = rc.Close() })
	store, err := redisstore.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	p := startPodOn(t, etcd, store, func(c *Config) { c.LivePods = ma.LivePods })
	if got := p.s.livePods(); got != 2 {
		t.Fatalf("service sees %d live pods, want 2", got)
	}
	// The leader counts one pod, and hands it the whole fail-open share of
	// the tenant budget (2/s by its fallback_rate, burst 3).
	waitShare(t, p, 1)
	if n := p.s.view.leaderPods(); n != 1 {
		t.Fatalf("the leader counts %d pods, want 1", n)
	}

	rs.Kill()
	// The user limit (2/s, burst 2, no fallback_rate) falls back to its
	// rate and burst divided among the live pods, from an empty bucket
	// (Redis may have spent its burst just before it died): the first
	// decision of a user is denied until one unit at the pod's share of the
	// rate has passed, and no unit is admitted sooner.
	decide := func(tenant, user string) Decision {
		d, err := p.s.Decide(ctx, map[string]string{"tenant": tenant, "user": user}, 1)
		if err != nil || !d.Fallback || d.Closed {
			t.Fatalf("Decide with Redis dead = %+v, %v; want a fail-open fallback decision", d, err)
		}
		return d
	}
	// Two live pods: 1/s burst 1 (slower than the tenant limit's 2/s, so
	// the user limit is the one that waits longest). Five quick requests
	// admit nothing. (Not waited for: with a burst of 1, memstore's
	// StartEmpty drops the key at the very instant its unit is due.)
	rate := newRateCheck(t, time.Second)
	d := decide("t1", "u1")
	if d.Allowed || d.Limit != "user" || d.RetryAfter < 990*time.Millisecond || d.RetryAfter > time.Second {
		t.Errorf("with 2 live pods the first fallback decision = %+v, want denied by user for 1s (2/s over 2 pods)", d)
	}
	rate.add(d.Allowed)
	for range 4 {
		rate.add(decide("t1", "u1").Allowed)
	}
	stopB()
	if err := <-doneB; err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 10*time.Second, func() error {
		if n := ma.LivePods(); n != 1 {
			return fmt.Errorf("pod a still sees %d pods", n)
		}
		return nil
	})
	// One live pod: its share doubles, 2/s burst 2 (a user and tenant of
	// their own, so no bucket of the first round is in the way).
	rate = newRateCheck(t, 500*time.Millisecond)
	d = decide("t2", "u2")
	if d.Allowed || d.RetryAfter < 490*time.Millisecond || d.RetryAfter > 500*time.Millisecond {
		t.Errorf("with 1 live pod the first fallback decision = %+v, want denied for 500ms (its share doubled: 2/s)", d)
	}
	rate.add(d.Allowed)
	rate.until(2, func() bool { return decide("t2", "u2").Allowed })
}
