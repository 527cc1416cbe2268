package gcra

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// The longest window bounds bursts per rate, and rates below one unit per
// window are invalid however small the burst.
func TestMaxBurst(t *testing.T) {
	cases := []struct {
		rate Rate
		want int64
		err  error
	}{
		{PerSecond(1_000_000), maxWindowMicros, nil},
		{PerSecond(1000), maxWindowMicros / 1000, nil},
		{PerHour(1), maxWindowMicros / 3_600_000_000, nil}, // 625,499
		{PerDay(1), 26_062, nil},
		{PerWeek(1), 3_723, nil},
		{PerDay(5_000_000), maxWindowMicros / 17_280, nil},
		{Rate{Count: 1, Period: 70 * 8766 * time.Hour}, 1, nil},
		{Rate{Count: 1, Period: 72 * 8766 * time.Hour}, 0, ErrRateTooLow},
		{Rate{Count: 0, Period: time.Second}, 0, ErrRate},
	}
	for _, c := range cases {
		if got := c.rate.MaxBurst(); got != c.want {
			t.Errorf("%v.MaxBurst() = %d, want %d", c.rate, got, c.want)
		}
		if err := c.rate.Validate(); !errors.Is(err, c.err) {
			t.Errorf("%v.Validate() = %v, want %v", c.rate, err, c.err)
		}
		if c.want == 0 {
			continue
		}
		if _, err := NewLimit(c.rate, c.want); err != nil {
			t.Errorf("NewLimit(%v, MaxBurst %d) = %v, want a limit", c.rate, c.want, err)
		}
		if _, err := NewLimit(c.rate, c.want+1); !errors.Is(err, ErrWindowTooLong) {
			t.Errorf("NewLimit(%v, MaxBurst+1) = %v, want ErrWindowTooLong", c.rate, err)
		}
	}
	if _, err := ParseRate("1/700000h"); !errors.Is(err, ErrRateTooLow) {
		t.Errorf("ParseRate(1/700000h) = %v, want ErrRateTooLow (T above 2^51 µs)", err)
	}
}

// FromPerSecond refuses rates whose interval leaves int64 (a conversion Go
// leaves to the platform) instead of answering ErrRateTooHigh.
func TestFromPerSecondTiny(t *testing.T) {
	for _, r := range []float64{1e-300, 5e-324, 1e-10} {
		if _, err := FromPerSecond(r, 1); !errors.Is(err, ErrRateTooLow) {
			t.Errorf("FromPerSecond(%g, 1) = %v, want ErrRateTooLow", r, err)
		}
	}
}

func TestFit(t *testing.T) {
	cases := []struct {
		name      string
		perSecond float64
		burst     int64
		want      Limit
		ok        bool
	}{
		{"as FromPerSecond", 5, 3, Limit{T: 200_000, Burst: 3}, true},
		{"fractional rate", 1.0 / 3, 2, Limit{T: 3_000_000, Burst: 2}, true},
		{"burst lowered to the window", 1.0 / 3600, math.MaxInt64, Limit{T: 3_600_000_000, Burst: maxWindowMicros / 3_600_000_000}, true},
		{"above a million per second", 3e6, 10, Limit{T: 1, Burst: 10}, true},
		{"zero rate", 0, 10, Limit{}, false},
		{"NaN rate", math.NaN(), 10, Limit{}, false},
		{"negative rate", -1, 10, Limit{}, false},
		{"zero burst", 5, 0, Limit{}, false},
		{"below one unit per window", 1e-12, 1, Limit{}, false},
		{"subnormal rate", 5e-324, 1, Limit{}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := Fit(c.perSecond, c.burst)
			if got != c.want || ok != c.ok {
				t.Errorf("Fit(%g, %d) = %+v, %v; want %+v, %v", c.perSecond, c.burst, got, ok, c.want, c.ok)
			}
		})
	}
}

// FuzzFit: whatever share of a budget a region is handed, Fit gives a valid
// limit no looser than the share (FromPerSecond's, where that succeeds), or
// says it admits nothing — only for rates near or below one unit per window.
func FuzzFit(f *testing.F) {
	f.Add(int64(1000), int64(time.Second), int64(math.MaxInt64), 0.1, 0.5)
	f.Add(int64(1), int64(time.Hour), int64(625_499), 1e-3, 1.0)
	f.Add(int64(1_000_000), int64(time.Second), int64(1)<<51, 1.0, 1.0)
	f.Add(int64(5), int64(time.Second), int64(3), 0.0, 0.0)
	f.Add(int64(1), int64(time.Hour), int64(1), 1e-300, 1.0)
	f.Fuzz(func(t *testing.T, count, period, burst int64, rateFrac, burstFrac float64) {
		share := Rate{Count: count, Period: time.Duration(period)}.PerSecond() * rateFrac
		b := int64(float64(burst) * burstFrac)
		l, ok := Fit(share, b)
		if !ok {
			if share > 0 && b >= 1 && 1e6/share <= float64(maxWindowMicros)/2 {
				t.Fatalf("Fit(%g, %d) = not ok for a rate well above one unit per window", share, b)
			}
			return
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("Fit(%g, %d) = %+v, invalid: %v", share, b, l, err)
		}
		if l.Burst > b || l.Burst < 1 {
			t.Fatalf("Fit(%g, %d) burst = %d, want 1 to %d", share, b, l.Burst, b)
		}
		if l.PerSecond() > share*(1+1e-12) {
			t.Fatalf("Fit(%g, %d) enforces %g/s, above the share", share, b, l.PerSecond())
		}
		if fl, err := FromPerSecond(share, b); err == nil && fl != l {
			t.Fatalf("Fit(%g, %d) = %+v, FromPerSecond = %+v: want the same where FromPerSecond succeeds", share, b, l, fl)
		}
	})
}

func TestRateString(t *testing.T) {
	for _, c := range []struct {
		r    Rate
		want string
	}{
		{PerSecond(5), "5/s"}, {PerMinute(5), "5/m"}, {PerHour(5), "5/h"},
		{PerDay(5_000_000), "5000000/d"}, {PerWeek(3), "3/w"}, {Rate{1, 48 * time.Hour}, "1/48h"},
		{Rate{1, 1000 * time.Hour}, "1/1000h"}, {Rate{1, 90 * time.Minute}, "1/1h30m"},
		{Rate{1, 10 * time.Minute}, "1/10m"}, {Rate{100, 10 * time.Second}, "100/10s"},
		{Rate{1, 2*time.Hour + 30*time.Second}, "1/2h0m30s"}, {Rate{1, 3 * time.Millisecond}, "1/3ms"},
	} {
		got := c.r.String()
		if got != c.want {
			t.Errorf("%#v.String() = %q, want %q", c.r, got, c.want)
		}
		if back, err := ParseRate(got); err != nil || back != c.r {
			t.Errorf("ParseRate(%q) = %v, %v; want %#v", got, back, err, c.r)
		}
	}
}

// Every spelling of a day and a week reads as 24 and 168 hours.
func TestParseRateDaysWeeks(t *testing.T) {
	for in, want := range map[string]Rate{
		"100/d": PerDay(100), "100/day": PerDay(100), "100/24h": PerDay(100),
		"9/w": PerWeek(9), "9/week": PerWeek(9), "9/168h": PerWeek(9),
	} {
		got, err := ParseRate(in)
		if err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseRate("1/fortnight"); err == nil || !strings.Contains(err.Error(), "d, w") {
		t.Errorf("ParseRate(1/fortnight) = %v, want an error listing d and w", err)
	}
}
