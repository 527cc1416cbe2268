package gcra

import "testing"

func BenchmarkDecideMicros(b *testing.B) {
	l := Limit{T: 1000, Burst: 200}
	now := int64(1_700_000_000_000_000)
	var s State
	b.ReportAllocs()
	for b.Loop() {
		now += 1000
		s, _, _ = DecideMicros(s, now, l, 1)
	}
}

func BenchmarkDecideAllMicros2(b *testing.B) {
	items := []Item{{Limit: Limit{T: 1000, Burst: 200}, Cost: 1}, {Limit: Limit{T: 20_000, Burst: 20}, Cost: 1}}
	now := int64(1_700_000_000_000_000)
	b.ReportAllocs()
	for b.Loop() {
		now += 20_000
		out := DecideAllMicros(items, now)
		items[0].State, items[1].State = out.States[0], out.States[1]
	}
}
