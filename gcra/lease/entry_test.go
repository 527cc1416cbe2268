package lease

import (
	"context"
	"testing"
	"unsafe"

	"github.com/allot-dev/allot/gcra"
)

// An entry fills one cache line, so that keys served on different cores do
// not share one.
func TestEntrySize(t *testing.T) {
	if got := unsafe.Sizeof(entry{}); got != 64 {
		t.Fatalf("unsafe.Sizeof(entry{}) = %d, want 64", got)
	}
}

// When a key's count of served decisions fills its bits, the decision that
// would overflow it moves the count to the Limiter's counter instead.
func TestServedCountSpills(t *testing.T) {
	l, err := New(nopStore{}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	e := l.entry("k")
	e.expires.Store(1 << 62)
	e.word.Store(servedMax<<tokenBits | 5)
	if rem, _, ok := l.take(e, 0, 2); !ok || rem != 3 {
		t.Fatalf("take = %d, %v; want 3, true", rem, ok)
	}
	if w := e.word.Load(); w != 3 {
		t.Fatalf("word = %#x, want 3 units and no count", w)
	}
	if s := l.Stats(); s.Served != servedMax+1 || s.Held != 3 {
		t.Fatalf("Stats = %+v, want %d served, 3 held", s, servedMax+1)
	}
	if _, _, ok := l.take(e, 0, 1); !ok {
		t.Fatal("take after the spill failed")
	}
	if s := l.Stats(); s.Served != servedMax+2 {
		t.Fatalf("Served = %d, want %d", s.Served, servedMax+2)
	}
}

type nopStore struct{}

func (nopStore) Decide(context.Context, []gcra.Request) (gcra.Decision, error) {
	return gcra.Decision{}, nil
}
