package pipeline_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/gcra/memstore"
	"github.com/allot-dev/allot/gcra/pipeline"
)

// FuzzAnswersInOrder: whatever the batch cap, flush slots and call sizes,
// concurrent DecideMany calls each get their own answers in order. Every
// request is on a fresh key whose burst encodes (caller, index), so the
// first decision's Remaining (burst - 1) names the request it answers.
func FuzzAnswersInOrder(f *testing.F) {
	f.Add(uint8(1), uint8(1), []byte{1, 2, 3})
	f.Add(uint8(4), uint8(2), []byte{1, 5, 1, 1, 9, 2, 2, 2})
	f.Add(uint8(128), uint8(4), []byte{0, 1, 200, 3})
	f.Fuzz(func(t *testing.T, maxBatch, flushers uint8, sizes []byte) {
		if maxBatch == 0 || flushers == 0 || len(sizes) > 32 {
			return
		}
		now := time.Unix(1_700_000_000, 0)
		mcfg := memstore.DefaultConfig()
		mcfg.Clock = func() time.Time { return now }
		ms, err := memstore.New(mcfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg := pipeline.DefaultConfig()
		cfg.MaxBatch, cfg.Flushers = int(maxBatch), int(flushers)
		st, err := pipeline.New(ms, cfg)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, len(sizes))
		for g, n := range sizes {
			n := int(n % 40)
			wg.Add(1)
			go func() {
				defer wg.Done()
				batch := make([][]gcra.Request, n)
				for i := range batch {
					burst := int64(1 + g*100 + i)
					batch[i] = []gcra.Request{{Key: fmt.Sprint(g, "/", i), Limit: gcra.Limit{T: 1000, Burst: burst}, Cost: 1}}
				}
				ans := st.DecideMany(context.Background(), batch)
				if len(ans) != n {
					errs <- fmt.Errorf("caller %d: %d answers, want %d", g, len(ans), n)
					return
				}
				for i, a := range ans {
					if want := int64(g*100 + i); a.Err != nil || a.Remaining != want {
						errs <- fmt.Errorf("caller %d answer %d: %+v, want remaining %d", g, i, a, want)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}
