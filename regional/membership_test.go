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
)

// Two pods of one region see each other through memberlist; when one stops,
// the survivor's fallback share doubles (and nothing else changes).
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

	redistest.Eventually(t, 10*time.Second, func() error {
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

	rs.Kill()
	// The user limit (2/s, burst 2, no fallback_rate) falls back to its
	// rate and burst divided among the live pods.
	admitted := func(user string) int {
		n := 0
		for range 5 {
			d, err := p.s.Decide(ctx, map[string]string{"tenant": "t1", "user": user}, 1)
			if err != nil || !d.Fallback {
				t.Fatalf("Decide with Redis dead = %+v, %v; want a fallback decision", d, err)
			}
			if d.Allowed {
				n++
			}
		}
		return n
	}
	if n := admitted("u1"); n != 1 {
		t.Errorf("with 2 live pods the fallback admitted %d of 5 quick requests, want 1 (burst 2 / 2 pods)", n)
	}
	stopB()
	if err := <-doneB; err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, 10*time.Second, func() error {
		if n := ma.LivePods(); n != 1 {
			return fmt.Errorf("pod a still sees %d pods", n)
		}
		return nil
	})
	if n := admitted("u2"); n != 2 {
		t.Errorf("with 1 live pod the fallback admitted %d of 5 quick requests, want 2 (its share doubled)", n)
	}
}
