package wait

import (
	"errors"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	n := 0
	Until(t, 5*time.Second, func() error {
		n++
		if n < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if n != 3 {
		t.Errorf("fn called %d times, want 3", n)
	}
}

// recorder captures a fatal failure without stopping the test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = format
	panic(r)
}

func TestUntilFailsAtTheDeadline(t *testing.T) {
	r := &recorder{TB: t}
	start := time.Now()
	func() {
		defer func() {
			if p := recover(); p != r {
				panic(p)
			}
		}()
		Until(r, 100*time.Millisecond, func() error { return errors.New("never") })
	}()
	if r.failed == "" {
		t.Fatal("Until did not fail when the condition never held")
	}
	if el := time.Since(start); el < 100*time.Millisecond || el > 2*time.Second {
		t.Errorf("Until failed after %v, want just past 100ms", el)
	}
}
