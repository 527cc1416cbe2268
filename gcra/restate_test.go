package gcra

import (
	"errors"
	"testing"
)

// A restate is where the next decision at the same instant would start:
// deciding after it, at that instant, gives what deciding without it gives,
// for every state (missing, rested, in use, under another limit) and cost;
// and it writes only keys under another limit.
func FuzzRestateIsTheDecisionsStart(f *testing.F) {
	f.Add(uint32(300_000), uint16(1), uint32(10_700), uint16(8), int64(-5000), uint16(1))
	f.Add(uint32(1000), uint16(10), uint32(1000), uint16(10), int64(4000), uint16(3))
	f.Add(uint32(1000), uint16(200), uint32(7), uint16(1), int64(0), uint16(1))
	f.Fuzz(func(t *testing.T, t0 uint32, b0 uint16, t1 uint32, b1 uint16, off int64, cost uint16) {
		old := Limit{T: 1 + int64(t0)%10_000_000, Burst: 1 + int64(b0)%1000}
		nl := Limit{T: 1 + int64(t1)%10_000_000, Burst: 1 + int64(b1)%1000}
		c := 1 + int64(cost)%nl.Burst
		const now = int64(1_700_000_000_000_000)
		if off < 0 {
			off = -(-off % (4 * old.T))
		} else {
			off %= old.Burst*old.T + 1
		}
		for _, s := range []State{{}, {TAT: now + off, T: old.T, Burst: old.Burst}, {TAT: now + off%(nl.Burst*nl.T+1), T: nl.T, Burst: nl.Burst}} {
			rs, write := RestateMicros(s, now, nl)
			if want := s.Exists() && (s.T != nl.T || s.Burst != nl.Burst); write != want {
				t.Fatalf("state %+v under %+v: write %v, want %v", s, nl, write, want)
			}
			if !write && rs != s {
				t.Fatalf("state %+v: changed to %+v without a write", s, rs)
			}
			a, ra, _ := DecideMicros(s, now, nl, c)
			b, rb, _ := DecideMicros(rs, now, nl, c)
			if ra != rb || a != b {
				t.Fatalf("state %+v, limit %+v, cost %d:\n direct   %+v %+v\n restated %+v %+v", s, nl, c, a, ra, b, rb)
			}
		}
	})
}

func TestValidateRestates(t *testing.T) {
	l := Limit{T: 1000, Burst: 10}
	for _, c := range []struct {
		reqs []Request
		want error
	}{
		{nil, ErrNoRequests},
		{[]Request{{Key: "", Limit: l}}, ErrKey},
		{[]Request{{Key: "a", Limit: Limit{T: 0, Burst: 1}}}, ErrRateTooHigh},
		{[]Request{{Key: "a", Limit: Limit{T: 1000, Burst: 0}}}, ErrBurst},
		{[]Request{{Key: "a", Limit: l}, {Key: "a", Limit: l}}, ErrDuplicateKey},
		{[]Request{{Key: "a", Limit: l, Cost: 0}, {Key: "b", Limit: l, Cost: -3}}, nil}, // costs are not read
	} {
		if err := ValidateRestates(c.reqs); !errors.Is(err, c.want) && (c.want != nil || err != nil) {
			t.Errorf("%+v: %v, want %v", c.reqs, err, c.want)
		}
	}
}
