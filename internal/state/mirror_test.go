package state

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/allot-dev/allot/internal/etcdtest"
	"github.com/allot-dev/allot/internal/wait"
)

type recorder struct {
	mu     sync.Mutex
	kv     map[string]string
	resets int
	block  chan struct{} // the first Reset waits on it
}

func (r *recorder) Reset(kvs []*mvccpb.KeyValue, _ int64) {
	r.mu.Lock()
	first := r.resets == 0
	r.resets++
	r.kv = map[string]string{}
	for _, kv := range kvs {
		r.kv[string(kv.Key)] = string(kv.Value)
	}
	r.mu.Unlock()
	if first && r.block != nil {
		<-r.block
	}
}

func (r *recorder) Put(kv *mvccpb.KeyValue) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.kv[string(kv.Key)] = string(kv.Value)
}

func (r *recorder) Delete(kv *mvccpb.KeyValue) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.kv, string(kv.Key))
}

func (r *recorder) get(k string) (string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.kv[k], r.resets
}

// A mirror follows puts and deletes, and when its watch cannot continue
// (here: its start revision was compacted away) it reads everything again.
func TestMirrorResyncsAfterCompaction(t *testing.T) {
	c := etcdtest.Start(t).Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := c.Put(ctx, "/p/a", "1"); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{block: make(chan struct{})}
	var errMu sync.Mutex
	var errs []error
	done := make(chan error, 1)
	go func() {
		done <- Mirror(ctx, c, "/p/", rec, 10*time.Millisecond, func(err error) {
			errMu.Lock()
			errs = append(errs, err)
			errMu.Unlock()
		})
	}()
	wait.Until(t, 10*time.Second, func() error {
		if v, _ := rec.get("/p/a"); v != "1" {
			return fmt.Errorf("first reset: /p/a = %q, want 1", v)
		}
		return nil
	})
	// While the mirror is between its read and its watch, the revisions it
	// would watch from are written and compacted away.
	for _, v := range []string{"2", "3"} {
		if _, err := c.Put(ctx, "/p/a", v); err != nil {
			t.Fatal(err)
		}
	}
	r, err := c.Put(ctx, "/p/b", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(ctx, r.Header.Revision); err != nil {
		t.Fatal(err)
	}
	close(rec.block)
	wait.Until(t, 10*time.Second, func() error {
		v, n := rec.get("/p/a")
		b, _ := rec.get("/p/b")
		if v != "3" || b != "x" || n < 2 {
			return fmt.Errorf("resync after compaction: /p/a = %q, /p/b = %q after %d resets, want 3, x after 2 or more", v, b, n)
		}
		return nil
	})
	errMu.Lock()
	if len(errs) == 0 || !errors.Is(errs[0], rpctypes.ErrCompacted) && !strings.Contains(errs[0].Error(), "compacted") {
		t.Errorf("mirror errors = %v, want a compaction", errs)
	}
	errMu.Unlock()
	// Then it follows puts and deletes again.
	if _, err := c.Delete(ctx, "/p/b"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "/p/c", "y"); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 10*time.Second, func() error {
		b, _ := rec.get("/p/b")
		cv, _ := rec.get("/p/c")
		if b != "" || cv != "y" {
			return fmt.Errorf("delete and put after the resync: /p/b = %q, /p/c = %q, want deleted, y", b, cv)
		}
		return nil
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Mirror returned %v, want context.Canceled", err)
	}
}
