package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/allot-dev/allot/internal/etcdtest"
	"github.com/allot-dev/allot/internal/state"
	"github.com/allot-dev/allot/internal/wait"
	"github.com/allot-dev/allot/shares"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/client/pkg/v3/logutil.(*MergeLogger).outputLoop"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
	)
}

func examplePolicy(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("../deploy/policy.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type node struct {
	c      *Coordinator
	cancel context.CancelFunc
	done   chan error
}

func startNode(t *testing.T, srv *etcdtest.Server, id string) *node {
	t.Helper()
	return startNodeWith(t, srv, id, nil)
}

// startNodeWith is startNode with a hook to adjust the coordinator before it
// runs.
func startNodeWith(t *testing.T, srv *etcdtest.Server, id string, adjust func(*Coordinator)) *node {
	t.Helper()
	return startNodeOn(t, srv.Client(t), id, adjust)
}

// startNodeOn is startNodeWith on a given etcd client.
func startNodeOn(t *testing.T, cli *clientv3.Client, id string, adjust func(*Coordinator)) *node {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ID = id
	cfg.Etcd = cli
	cfg.GRPCAddr = id + ":9000"
	cfg.SessionTTL = 2 * time.Second
	cfg.RebalanceInterval = 100 * time.Millisecond
	cfg.Lease = 5 * time.Second
	cfg.Shares.Interval = cfg.RebalanceInterval
	if testing.Verbose() {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if adjust != nil {
		adjust(c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &node{c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { n.done <- c.Run(ctx) }()
	t.Cleanup(n.stop)
	return n
}

func (n *node) stop() {
	n.cancel()
	if err := <-n.done; err != nil {
		panic(err)
	}
	n.done <- nil // let a second stop return
}

func leaderOf(nodes ...*node) (*node, error) {
	var l *node
	for _, n := range nodes {
		if n.c.IsLeader() {
			if l != nil {
				return nil, errors.New("two leaders")
			}
			l = n
		}
	}
	if l == nil {
		return nil, errors.New("no leader")
	}
	return l, nil
}

func report(t *testing.T, n *node, region string, offered float64) (ReportAnswer, error) {
	t.Helper()
	return n.c.Report(context.Background(), PodReport{
		Region: region, Pod: region + "-pod", Interval: 100 * time.Millisecond,
		Usage: map[string]shares.Usage{"t42": {Offered: offered, Admitted: offered}}, LivePods: 1,
	})
}

func TestElectionFailoverAndFencing(t *testing.T) {
	// resign: the leader shuts down and resigns. crash: its etcd client dies
	// without resigning, so its session lapses after the TTL.
	// gone: a pod the old leader leased is gone, so the new leader cannot
	// end its learning early.
	for _, tc := range []struct {
		name        string
		crash, gone bool
	}{{"resign", false, false}, {"crash", true, false}, {"a leased pod gone", false, true}} {
		t.Run(tc.name, func(t *testing.T) { testFailover(t, tc.crash, tc.gone) })
	}
}

func testFailover(t *testing.T, crash, gone bool) {
	srv := etcdtest.Start(t)
	admin := state.New(srv.Client(t), "")
	ctx := context.Background()
	if _, err := admin.ApplyPolicy(ctx, examplePolicy(t), 0, "test"); err != nil {
		t.Fatal(err)
	}
	a, b := startNode(t, srv, "a"), startNode(t, srv, "b")
	var first *node
	wait.Until(t, 10*time.Second, func() (err error) { first, err = leaderOf(a, b); return err })
	second := a
	if first == a {
		second = b
	}
	// The follower names the leader to a reporting pod.
	wait.Until(t, 5*time.Second, func() error {
		_, err := report(t, second, "us-east", 10)
		var nl *NotLeaderError
		if !errors.As(err, &nl) || nl.Leader != first.c.ID()+":9000" {
			return fmt.Errorf("follower does not name the leader: %w", err)
		}
		return nil
	})
	// Two pods per region report to the leader until it has learned and
	// they hold its grants.
	regions := []string{"us-east", "eu-west", "ap-south"}
	var pods []*tpod
	for _, r := range regions {
		pods = append(pods, newTPod(r, r+"-0"), newTPod(r, r+"-1"))
	}
	if gone {
		pods = append(pods, newTPod("us-east", "us-east-2"))
	}
	use := map[string]shares.Usage{"t42": {Offered: 10, Admitted: 10}}
	wait.Until(t, 20*time.Second, func() error {
		for _, p := range pods {
			if _, err := p.report(first.c, time.Now(), 100*time.Millisecond, use, true); err != nil {
				return err
			}
		}
		for _, p := range pods {
			if _, ok := p.st.Grant("t42"); !ok || !p.st.Leased(time.Now()) {
				return fmt.Errorf("%s holds no leased grant of t42 yet", p.id)
			}
		}
		return nil
	})
	oldTerm, _ := pods[0].st.State()
	if gone {
		pods = pods[:len(pods)-1]
	}

	// End the leader's session: the other leads within the session TTL
	// (plus the time to notice).
	start := time.Now()
	if crash {
		_ = first.c.cfg.Etcd.Close()
	} else {
		first.stop()
	}
	wait.Until(t, 5*time.Second, func() error {
		if !second.c.IsLeader() {
			return errors.New("second has not taken over")
		}
		return nil
	})
	took := time.Since(start)
	t.Logf("failover took %v", took)
	if took > first.c.cfg.SessionTTL+2*time.Second {
		t.Errorf("failover took %v, want within the session TTL %v (+2s to notice)", took, first.c.cfg.SessionTTL)
	}

	// The new leader learns first: it sends no grant and renews only the
	// grants pods report holding. Every pod the old leader leased is on the
	// roster; once each has said what it holds (two reports), learning
	// ends, instead of after Lease + SessionTTL, when every lease of the
	// old term it does not know of has expired. With a leased pod gone, it
	// waits that long.
	var lead *shares.Leader
	wait.Until(t, 5*time.Second, func() error {
		second.c.mu.Lock()
		defer second.c.mu.Unlock()
		if second.c.term == nil || second.c.term.lead == nil {
			return errors.New("no protocol term yet")
		}
		lead = second.c.term.lead
		return nil
	})
	full := second.c.cfg.Lease + second.c.cfg.SessionTTL
	every := time.NewTicker(100 * time.Millisecond)
	defer every.Stop()
	for learning := true; learning; {
		for _, p := range pods {
			ans, err := p.report(second.c, time.Now(), 100*time.Millisecond, use, true)
			if err != nil {
				t.Fatal(err)
			}
			if ans.Learning {
				if len(ans.Entries) != 0 || ans.Lease != 0 && ans.HeldTerm == 0 {
					t.Fatalf("the learning leader answered %s with %+v", p.id, ans.Answer)
				}
				continue
			}
			learning = false
		}
		if time.Since(lead.Start()) > full+5*time.Second {
			t.Fatal("the new leader still learns")
		}
		<-every.C
	}
	second.c.mu.Lock()
	learned := second.c.term.lead.LearningUntil().Sub(second.c.term.lead.Start())
	second.c.mu.Unlock()
	t.Logf("the new leader learned for %v (Lease + SessionTTL: %v)", learned, full)
	if gone && learned != full {
		t.Errorf("with a leased pod gone the new leader learned for %v, want the full %v", learned, full)
	}
	if gone {
		// Its lease surely ended: the leader drops it from the roster, so
		// that the next leader need not wait for it.
		wait.Until(t, 5*time.Second, func() error {
			on, err := admin.Roster(ctx)
			if err != nil {
				return err
			}
			for _, p := range on {
				if p.Pod == "us-east-2" {
					return errors.New("us-east-2 is still on the roster")
				}
			}
			if len(on) != len(pods) {
				return fmt.Errorf("roster holds %d pods, want the %d that report", len(on), len(pods))
			}
			return nil
		})
	}
	if !gone && learned > time.Second {
		t.Errorf("the new leader learned for %v, want under a second: every pod on the roster reported twice within it", learned)
	}
	// Then it grants, in a later term than the old leader's.
	wait.Until(t, 10*time.Second, func() error {
		for _, p := range pods {
			if _, err := p.report(second.c, time.Now(), 100*time.Millisecond, use, true); err != nil {
				return err
			}
		}
		for _, p := range pods {
			term, _ := p.st.State()
			if term <= oldTerm || !p.st.Leased(time.Now()) {
				return fmt.Errorf("%s holds term %d (old %d), leased %v", p.id, term, oldTerm, p.st.Leased(time.Now()))
			}
		}
		return nil
	})
	// The deposed leader takes no report.
	if !crash {
		if _, err := pods[0].report(first.c, time.Now(), time.Second, use, false); err == nil {
			t.Fatal("a stopped leader answered a report")
		}
	}
}

func TestConfigValidate(t *testing.T) {
	good := DefaultConfig()
	good.Etcd = nil
	cases := []struct {
		name  string
		edit  func(*Config)
		field string
	}{
		{"no etcd", func(*Config) {}, "Etcd"},
	}
	for _, c := range cases {
		cfg := good
		c.edit(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: Validate() = %v, want an error naming %s", c.name, err, c.field)
		}
	}
}

// Pods find the leader through the election.
func TestLeaderLookup(t *testing.T) {
	srv := etcdtest.Start(t)
	st := state.New(srv.Client(t), "")
	if _, err := st.Leader(context.Background()); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("Leader() with no coordinator = %v, want ErrNotFound", err)
	}
	n := startNode(t, srv, "x")
	wait.Until(t, 10*time.Second, func() error {
		l, err := st.Leader(context.Background())
		if err != nil {
			return err
		}
		if l.ID != "x" || l.GRPC != "x:9000" || !n.c.IsLeader() {
			return errors.New("leader record does not name x")
		}
		return nil
	})
}
