package envoyxds

import (
	"math/rand/v2"
	"time"
)

// backoff yields the waits between reconnections: initial, doubled after
// each, at most max; with jitter each is spread uniformly within ±factor
// of it and kept at most max.
type backoff struct {
	initial, max time.Duration
	factor       float64
	jitter       bool
	next         time.Duration // the wait before randomization
	rand         func() float64
}

func newBackoff(c Config) *backoff {
	return &backoff{initial: c.BackoffInitial, max: c.BackoffMax, factor: c.BackoffRandomFactor, jitter: c.Jitter, next: c.BackoffInitial, rand: rand.Float64}
}

// wait returns the next wait and doubles the one after it.
func (b *backoff) wait() time.Duration {
	d := b.next
	if b.next > b.max/2 {
		b.next = b.max
	} else {
		b.next *= 2
	}
	if b.jitter && b.factor > 0 {
		f := float64(d) * (1 + b.factor*(2*b.rand()-1))
		d = min(time.Duration(f), b.max)
	}
	return d
}

// reset starts again from the initial wait.
func (b *backoff) reset() { b.next = b.initial }

// limiter lets one log line through per interval and counts the others.
type limiter struct {
	every      time.Duration
	last       time.Time
	suppressed int
}

// allow reports whether a line may be logged at now and how many were
// held back since the last one that was.
func (l *limiter) allow(now time.Time) (bool, int) {
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		l.suppressed++
		return false, 0
	}
	n := l.suppressed
	l.last, l.suppressed = now, 0
	return true, n
}
