package main

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestDriveCountsDecisions drives fake calls for a short window: a batch
// driver's throughput counts its decisions, its latencies its calls; a
// partly failed batch counts what it decided and the rest as errors.
func TestDriveCountsDecisions(t *testing.T) {
	tests := []struct {
		name    string
		per     int
		decided int // per call
		denied  int
		err     error
	}{
		{"one decision per call", 1, 1, 0, nil},
		{"one denied per call", 1, 1, 1, nil},
		{"batch of 64", 64, 64, 0, nil},
		{"batch of 64, 4 failed, 2 denied", 64, 60, 2, errors.New("a request failed")},
		{"failed call", 8, 0, 0, errors.New("unavailable")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var firsts [3]atomic.Int64 // calls whose first tenant was 0, per, 2*per
			d := driver{per: tt.per, call: func(_ context.Context, _, first int) (int, int, error) {
				if i := first / tt.per; first%tt.per == 0 && i < len(firsts) {
					firsts[i].Add(1)
				} else if first%tt.per != 0 {
					t.Errorf("call(first=%d): not a multiple of per=%d", first, tt.per)
				}
				return tt.decided, tt.denied, tt.err
			}}
			s := drive(context.Background(), d, 4, 3*tt.per, 0, 30*time.Millisecond, nil)
			calls := int64(len(s.lat))
			if tt.decided == 0 {
				if s.decisions != 0 || calls != 0 || s.errors == 0 || s.errors%int64(tt.per) != 0 || s.firstErr == nil {
					t.Errorf("drive = %d decisions, %d calls, %d errors (%v), want 0, 0 and whole batches of %d with an error", s.decisions, calls, s.errors, s.firstErr, tt.per)
				}
				return
			}
			if calls == 0 || s.decisions != calls*int64(tt.decided) || s.denied != calls*int64(tt.denied) {
				t.Errorf("drive = %d decisions, %d denied over %d calls, want %d and %d per call", s.decisions, s.denied, calls, tt.decided, tt.denied)
			}
			if missed := int64(tt.per - tt.decided); s.errors != calls*missed || (missed > 0) != (s.firstErr != nil) {
				t.Errorf("drive = %d errors (first %v) over %d calls, want %d per call", s.errors, s.firstErr, calls, missed)
			}
			for i := range firsts {
				if firsts[i].Load() == 0 {
					t.Errorf("no call started at tenant %d: tenants do not rotate by %d", i*tt.per, tt.per)
				}
			}
		})
	}
}
