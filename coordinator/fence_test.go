package coordinator

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/allot-dev/allot/internal/etcdtest"
	"github.com/allot-dev/allot/internal/wait"
)

// A leader cut from etcd stops answering reports before etcd can expire its
// election session, so before any other coordinator can lead: the new
// leader may renew what pods hold without waiting for the deposed one to
// notice (shares.LeaderConfig.Deposed = 0). The cut is real: the leader
// reaches etcd through a proxy that drops every connection.
func TestLeaderFencesItselfBeforeItsSessionExpires(t *testing.T) {
	srv := etcdtest.Start(t)
	admin := srv.Client(t)
	link := startLinkProxy(t, srv.Endpoint)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{link.Endpoint()}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	a := startNodeOn(t, cli, "a", nil)
	wait.Until(t, 10*time.Second, func() error {
		if !a.c.IsLeader() {
			return errors.New("a does not lead")
		}
		return nil
	})
	b := startNode(t, srv, "b")
	var nl *NotLeaderError
	if _, err := report(t, a, "us-east", 1); errors.As(err, &nl) {
		t.Fatalf("the leader refuses reports before any cut: %v", err)
	}

	ctx := context.Background()
	prefix := a.c.store.ElectionPrefix()
	keys := func() int64 {
		r, err := admin.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return r.Count
	}
	wait.Until(t, 10*time.Second, func() error {
		if n := keys(); n != 2 {
			return fmt.Errorf("%d election keys, want 2 (a and b campaigning)", n)
		}
		return nil
	})
	cut := time.Now()
	link.Cut()
	wait.Until(t, 2*a.c.cfg.SessionTTL, func() error {
		if _, err := report(t, a, "us-east", 1); !errors.As(err, &nl) {
			return fmt.Errorf("a still answers %v after it was cut from etcd (session TTL %v)", time.Since(cut), a.c.cfg.SessionTTL)
		}
		return nil
	})
	fenced := time.Since(cut)
	// At that instant a's session still lives on etcd and b does not lead.
	if n := keys(); n != 2 {
		t.Fatalf("when a fenced itself (%v after the cut) %d election keys were left, want 2: its session had expired", fenced, n)
	}
	if b.c.IsLeader() {
		t.Fatalf("b leads when a fenced itself (%v after the cut)", fenced)
	}
	if n := testutil.ToFloat64(a.c.m.reports.WithLabelValues("us-east", "fenced")); n < 1 {
		t.Fatalf("reports refused as fenced: %v, want at least 1 (the refusal was not the fence's)", n)
	}
	t.Logf("a fenced itself %v after the cut (session TTL %v)", fenced, a.c.cfg.SessionTTL)
	// With its fence lapsed, a leaves the election rather than lead
	// without answering.
	wait.Until(t, 5*time.Second, func() error {
		if a.c.IsLeader() {
			return errors.New("a still leads, fenced")
		}
		return nil
	})
	wait.Until(t, 15*time.Second, func() error {
		if !b.c.IsLeader() {
			return errors.New("b does not lead")
		}
		return nil
	})
	t.Logf("b leads %v after the cut", time.Since(cut))
	link.Heal()
}
