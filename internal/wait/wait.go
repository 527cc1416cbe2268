// Package wait is the one way tests wait on a real system: poll a condition
// until it holds or a deadline passes, backing off from 1 ms to 50 ms
// between tries. Tests never sleep for a fixed time to let something
// happen; they wait for the thing itself.
package wait

import (
	"testing"
	"time"
)

// Until calls fn until it returns nil, failing tb with fn's last error when
// within has passed.
func Until(tb testing.TB, within time.Duration, fn func() error) {
	tb.Helper()
	deadline := time.Now().Add(within)
	pause := time.Millisecond
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("condition not met within %v: %v", within, err)
		}
		t := time.NewTimer(pause)
		<-t.C
		pause = min(2*pause, 50*time.Millisecond)
	}
}
