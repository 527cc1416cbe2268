package memstore

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-dev/allot/gcra"
)

func benchStore(b *testing.B) *Store {
	s, err := New(DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func benchKeys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = "allot:v1:{t" + strconv.Itoa(i%97) + "}:user:user=" + strconv.Itoa(i)
	}
	return ks
}

// One goroutine, 4096 keys, the wall clock.
func BenchmarkDecide(b *testing.B) {
	s := benchStore(b)
	keys := benchKeys(4096)
	l := gcra.Limit{T: 1, Burst: 1_000_000}
	ctx := context.Background()
	reqs := make([]gcra.Request, 1)
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		reqs[0] = gcra.Request{Key: keys[i&4095], Limit: l, Cost: 1}
		if _, err := s.Decide(ctx, reqs); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// GOMAXPROCS goroutines over 4096 keys.
func BenchmarkDecideParallel(b *testing.B) {
	s := benchStore(b)
	keys := benchKeys(4096)
	l := gcra.Limit{T: 1, Burst: 1_000_000}
	var seq atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(1000))
		reqs := make([]gcra.Request, 1)
		for pb.Next() {
			reqs[0] = gcra.Request{Key: keys[i&4095], Limit: l, Cost: 1}
			if _, err := s.Decide(context.Background(), reqs); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// GOMAXPROCS goroutines on one key, with a fixed clock (no time.Now cost).
func BenchmarkDecideParallelOneKey(b *testing.B) {
	cfg := DefaultConfig()
	t0 := time.Unix(1_700_000_000, 0)
	cfg.Clock = func() time.Time { return t0 }
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	l := gcra.Limit{T: 1, Burst: 1 << 40}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		reqs := []gcra.Request{{Key: "hot", Limit: l, Cost: 1}}
		for pb.Next() {
			if _, err := s.Decide(context.Background(), reqs); err != nil {
				b.Fatal(err)
			}
		}
	})
}
