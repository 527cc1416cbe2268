package coordinator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/allot-dev/allot/internal/etcdtest"
	"github.com/allot-dev/allot/internal/wait"
)

// linkProxy relays TCP connections from a loopback port to an etcd member:
// a link that a test can cut (every relayed connection closed, new ones
// refused) and heal.
type linkProxy struct {
	l      net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func startLinkProxy(t *testing.T, endpoint string) *linkProxy {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &linkProxy{l: l, target: u.Host, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		_ = l.Close()
		p.sever()
		p.wg.Wait()
	})
	return p
}

// Endpoint is the proxy's client URL.
func (p *linkProxy) Endpoint() string { return "http://" + p.l.Addr().String() }

func (p *linkProxy) accept() {
	for {
		in, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			_ = in.Close()
			continue
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			_ = in.Close()
			continue
		}
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			_ = dst.Close()
			_ = src.Close()
		}
		p.wg.Go(func() { pipe(out, in) })
		p.wg.Go(func() { pipe(in, out) })
	}
}

// sever closes every relayed connection.
func (p *linkProxy) sever() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

// Cut closes the relayed connections and refuses new ones until Heal.
func (p *linkProxy) Cut() {
	p.mu.Lock()
	p.cut = true
	p.mu.Unlock()
	p.sever()
}

// Heal relays new connections again.
func (p *linkProxy) Heal() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// When the election observer's watch breaks, Election.Observe closes its
// channel without a word. Here it breaks for real: the follower's link to
// etcd is cut while the leader changes and etcd compacts its history past
// the observer's watch, so the watch, resumed once the link heals, is
// refused as compacted. The observer must observe again and learn the new
// leader; before, it stopped and named the old leader for as long as its
// session lived.
//
// The observer runs alone (observe, not Run): a campaigning follower's own
// watch would break too and, by starting a new session, hide the
// observer's failure.
func TestObserverSurvivesBrokenWatch(t *testing.T) {
	srv := etcdtest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	a := startNode(t, srv, "a")
	wait.Until(t, 10*time.Second, func() error {
		if !a.c.IsLeader() {
			return errors.New("a does not lead")
		}
		return nil
	})

	link := startLinkProxy(t, srv.Endpoint)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{link.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	cfg := DefaultConfig()
	cfg.ID, cfg.Etcd = "follower", cli
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// A session that outlives the cut: only the watch breaks.
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(30))
	if err != nil {
		t.Fatal(err)
	}
	octx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { f.observe(octx, concurrency.NewElection(sess, f.store.ElectionPrefix())) })
	t.Cleanup(func() {
		stop()
		wg.Wait()
		_ = sess.Close()
	})
	leaderIs := func(id string) func() error {
		return func() error {
			if got := f.Leader().ID; got != id {
				return fmt.Errorf("follower names leader %q, want %q", got, id)
			}
			return nil
		}
	}
	wait.Until(t, 10*time.Second, leaderIs("a"))

	link.Cut()
	a.stop() // resigns
	b := startNode(t, srv, "b")
	wait.Until(t, 10*time.Second, func() error {
		if !b.c.IsLeader() {
			return errors.New("b does not lead")
		}
		return nil
	})
	resp, err := admin.Get(ctx, "compact-to")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	link.Heal()

	wait.Until(t, 20*time.Second, leaderIs("b"))
}

// A follower names the leader to pods, and the new leader after a leader
// change.
func TestFollowerNamesNewLeader(t *testing.T) {
	srv := etcdtest.Start(t)
	a := startNode(t, srv, "a")
	wait.Until(t, 10*time.Second, func() error {
		if !a.c.IsLeader() {
			return errors.New("a does not lead")
		}
		return nil
	})
	b, c := startNode(t, srv, "b"), startNode(t, srv, "c")
	names := func(n *node, leader string) func() error {
		return func() error {
			_, err := report(t, n, "us-east", 1)
			var nl *NotLeaderError
			if !errors.As(err, &nl) || nl.Leader != leader+":9000" {
				return fmt.Errorf("%s answers a report with %w, want a *NotLeaderError naming %s", n.c.ID(), err, leader)
			}
			return nil
		}
	}
	wait.Until(t, 10*time.Second, names(b, "a"))
	wait.Until(t, 10*time.Second, names(c, "a"))

	a.stop()
	var next, follower *node
	wait.Until(t, 15*time.Second, func() (err error) {
		next, err = leaderOf(b, c)
		return err
	})
	follower = b
	if next == b {
		follower = c
	}
	wait.Until(t, 10*time.Second, names(follower, next.c.ID()))
}
