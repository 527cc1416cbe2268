package pipeline_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/gcra/memstore"
	"github.com/allot-dev/allot/gcra/pipeline"
)

// Sixteen callers decide at once through one pipeline Store; calls that
// meet a busy flush slot ride together in the next DecideMany. Each caller
// gets its own answers: three allowed out of four on its own key.
func Example() {
	now := time.Unix(1_700_000_000, 0)
	mcfg := memstore.DefaultConfig()
	mcfg.Clock = func() time.Time { return now }
	ms, _ := memstore.New(mcfg) // in production: a redisstore.Store
	st, _ := pipeline.New(ms, pipeline.DefaultConfig())
	l, _ := gcra.NewLimit(gcra.PerSecond(1), 3)
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := []gcra.Request{{Key: fmt.Sprint("caller-", g), Limit: l, Cost: 1}}
			for range 4 {
				if d, err := st.Decide(context.Background(), req); err == nil && d.Allowed {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	fmt.Println(allowed.Load(), "allowed of 64")
	// Output:
	// 48 allowed of 64
}
