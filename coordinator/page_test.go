package coordinator

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-dev/allot/coordinator/statuspage"
	"github.com/allot-dev/allot/internal/wait"
	"github.com/allot-dev/allot/shares"
)

// stalledPage is a status page whose Commit, once armed, waits until
// release is closed.
type stalledPage struct {
	statusPage
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (p *stalledPage) unstall() { p.armed.Store(false); p.once.Do(func() { close(p.release) }) }

func (p *stalledPage) Commit(s statuspage.Snapshot) {
	if p.armed.Load() {
		close(p.entered)
		<-p.release
	}
	p.statusPage.Commit(s)
}

// stalledWriter is a client that stops reading: its first Write waits until
// release is closed.
type stalledWriter struct {
	*httptest.ResponseRecorder
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (w *stalledWriter) Write(b []byte) (int, error) {
	w.once.Do(func() {
		close(w.entered)
		<-w.release
	})
	return w.ResponseRecorder.Write(b)
}

// within fails the test unless fn returns within d.
func within(t *testing.T, d time.Duration, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not complete within %v: blocked behind the status page", what, d)
	}
}

// The status page's work runs outside the coordinator's lock: while the
// page takes a rebalance's snapshot in (here: stalled), and while it renders
// to a client that stops reading, pods' reports are answered and the
// leader rebalances.
func TestStatusPageOutsideTheLock(t *testing.T) {
	var page *stalledPage
	k := startTicked(t, func(c *Coordinator) {
		page = &stalledPage{statusPage: c.page, entered: make(chan struct{}), release: make(chan struct{})}
		c.page = page
	})
	// (Registered after the coordinator's cleanup, so run before it: a
	// failing test does not leave the leader stalled.)
	t.Cleanup(page.unstall)
	pod := newTPod("us-east", "us-east-0")
	use := map[string]shares.Usage{"t1": {Offered: 10, Admitted: 10}}
	report := func() {
		if _, err := pod.report(k.n.c, k.now(), 100*time.Millisecond, use, true); err != nil {
			t.Errorf("report: %v", err)
		}
	}
	report()

	// A rebalance whose snapshot the page is slow to take in.
	page.armed.Store(true)
	r0 := k.rebalances()
	go func() { k.tick <- time.Time{} }()
	<-page.entered
	within(t, 5*time.Second, "a report while the page commits", report)
	page.unstall()
	wait.Until(t, 10*time.Second, func() error {
		if k.rebalances() <= r0 {
			return errors.New("the stalled rebalance did not complete")
		}
		return nil
	})

	// A render to a client that stops reading.
	w := &stalledWriter{ResponseRecorder: httptest.NewRecorder(), entered: make(chan struct{}), release: make(chan struct{})}
	var unstall sync.Once
	t.Cleanup(func() { unstall.Do(func() { close(w.release) }) })
	rendered := make(chan struct{})
	go func() {
		defer close(rendered)
		k.n.c.Handler(Auth{Insecure: true}, nil).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	}()
	<-w.entered
	within(t, 5*time.Second, "a report while the page renders", report)
	within(t, 10*time.Second, "a rebalance while the page renders", func() { k.rebalance(t) })
	unstall.Do(func() { close(w.release) })
	<-rendered
	if body := w.Body.String(); w.Code != http.StatusOK || !strings.Contains(body, "Leader") || !strings.Contains(body, "<td>t1</td>") {
		t.Errorf("GET / = %d, want the leader's page listing t1's grants:\n%.2000s", w.Code, body)
	}
}
