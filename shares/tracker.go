package shares

import (
	"math"
	"time"
)

// TrackerConfig configures a [Tracker]. The zero value of a field means its
// default.
type TrackerConfig struct {
	// Window is the span over which a tenant's recent rate is compared
	// with the rate its pod last reported. Default 300ms.
	Window time.Duration
	// Z is how many standard deviations of a Poisson count the window's
	// offered count must be from what the reported rate predicts for a
	// step. Default 5.
	Z float64
	// MinChange is the smallest relative move of the offered rate that is
	// a step, whatever the counts. Default 0.3.
	MinChange float64
}

// trackerBuckets is how many buckets a Window is counted in.
const trackerBuckets = 6

func (c *TrackerConfig) fill() {
	if c.Window == 0 {
		c.Window = 300 * time.Millisecond
	}
	if c.Z == 0 {
		c.Z = 5
	}
	if c.MinChange == 0 {
		c.MinChange = 0.3
	}
}

// Validate reports whether c is usable (after defaults); errors wrap
// ErrInvalidConfig and name the field.
func (c TrackerConfig) Validate() error {
	c.fill()
	switch {
	case c.Window < trackerBuckets*time.Millisecond:
		return configErr("Window", "%v: want at least %v", c.Window, trackerBuckets*time.Millisecond)
	case !(c.Z > 0) || math.IsInf(c.Z, 0):
		return configErr("Z", "%v: want a positive number", c.Z)
	case !(c.MinChange > 0) || c.MinChange > 10:
		return configErr("MinChange", "%v: want (0, 10]", c.MinChange)
	}
	return nil
}

// Tracker is a pod's count of each tenant's traffic between reports, and
// the detector of steps: a tenant whose offered rate moved away from what
// the pod last told the leader, by more than noise explains, is reported at
// once in a small report of its own (see
// docs/protocol.md, "Early reports") instead of waiting for the next
// periodic one. A tenant seen for the first time is a step: its pod asks for
// a grant at once. Pure: time is passed in. Not safe for concurrent use.
type Tracker struct {
	cfg      TrackerConfig
	bucket   time.Duration
	tenants  map[string]*track
	stepped  []string
	firsts   int // of stepped, tenants seen for the first time
	lastFull time.Time
}

// track is one tenant's counts.
type track struct {
	off, adm float64   // since start, for the next report
	start    time.Time // when off and adm started counting
	// refRate, refDeny: the offered rate and denial share its pod last
	// reported (refSet false: never).
	refRate, refDeny float64
	refSet           bool
	// The detector's buckets: b[cur] started at bStart; the others are the
	// trackerBuckets−1 before it.
	bOff, bAdm [trackerBuckets]float64
	// bDec counts the decisions behind bOff: a decision of cost c adds
	// c units, so a count of units varies c times more than a Poisson
	// count of as many units (see cost).
	bDec   [trackerBuckets]float64
	cur    int
	bStart time.Time
	// young: the tenant was first seen at born, less than a Window ago
	// or not yet reported since; its first step (at first sight) said
	// little of its rate, so it steps again once a Window old.
	born     time.Time
	young    bool
	looks    int  // further looks since the second look (at most maxLooks)
	stepped  bool // in Tracker.stepped
	fromStep bool // off and adm count from a step report
	idle     int  // full reports without traffic
}

// NewTracker returns an empty tracker whose first report covers from now.
func NewTracker(now time.Time, cfg TrackerConfig) (*Tracker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.fill()
	return &Tracker{cfg: cfg, bucket: cfg.Window / trackerBuckets, tenants: map[string]*track{}, lastFull: now}, nil
}

// roll moves tr's buckets forward to now, and reports whether a bucket
// ended.
func (t *Tracker) roll(tr *track, now time.Time) bool {
	if tr.bStart.IsZero() {
		tr.bStart = now
		return false
	}
	n := int(now.Sub(tr.bStart) / t.bucket)
	if n <= 0 {
		return false
	}
	for j := 0; j < min(n, trackerBuckets); j++ {
		tr.cur = (tr.cur + 1) % trackerBuckets
		tr.bOff[tr.cur], tr.bAdm[tr.cur], tr.bDec[tr.cur] = 0, 0, 0
	}
	tr.bStart = tr.bStart.Add(time.Duration(n) * t.bucket)
	return true
}

// window returns tr's offered and admitted units over its buckets and the
// span they cover.
func (t *Tracker) window(tr *track, now time.Time) (off, adm float64, span time.Duration) {
	for j := range trackerBuckets {
		off += tr.bOff[j]
		adm += tr.bAdm[j]
	}
	span = time.Duration(trackerBuckets-1)*t.bucket + now.Sub(tr.bStart)
	// A tenant younger than the window counts from its first sight.
	if age := now.Sub(tr.born); age < span {
		span = max(age, t.bucket)
	}
	return off, adm, span
}

// Add counts offered units of tenant at now, admitted of them admitted, and
// reports whether the tenant just stepped (it is then among the tenants
// [Tracker.Steps] returns until they are reported). The units are taken as
// decisions of one unit each; AddDecisions says how many decisions asked
// for them.
func (t *Tracker) Add(now time.Time, tenant string, offered, admitted float64) bool {
	return t.AddDecisions(now, tenant, offered, admitted, offered)
}

// AddDecisions is Add for offered units asked for by decisions decisions
// (of cost offered/decisions on average): a tenant whose decisions cost
// many units each (tokens) counts units in lumps, and the step tests judge
// its counts on that scale, not as a Poisson count of units.
func (t *Tracker) AddDecisions(now time.Time, tenant string, offered, admitted, decisions float64) bool {
	tr := t.tenants[tenant]
	if tr == nil {
		tr = &track{start: now, born: now, young: true}
		t.tenants[tenant] = tr
	}
	rolled := t.roll(tr, now)
	tr.off += offered
	tr.adm += admitted
	tr.bOff[tr.cur] += offered
	tr.bAdm[tr.cur] += admitted
	tr.bDec[tr.cur] += decisions
	tr.idle = 0
	// The window is judged once per bucket (and at a tenant's first
	// sight): judging it at every decision would test the same noise
	// hundreds of times a second.
	if tr.stepped || (!rolled && tr.refSet) {
		return false
	}
	first := !tr.refSet
	if !t.isStep(tr, now) {
		return false
	}
	if first {
		t.firsts++
	}
	tr.stepped = true
	t.stepped = append(t.stepped, tenant)
	return true
}

// isStep reports whether tr's window says its rate moved.
func (t *Tracker) isStep(tr *track, now time.Time) bool {
	if !tr.refSet {
		return true // first seen: ask for a grant
	}
	if tr.young {
		if now.Sub(tr.born) < t.cfg.Window {
			return false
		}
		tr.young = false
		// A Window old: say its rate, if its window counted enough to
		// say one (a sparse key's one decision says nothing a periodic
		// report will not say better).
		return t.decisions(tr) >= minLookDecisions
	}
	// Only the offered rate: it is what demand is measured by. (A share
	// denied moves with every grant change, which the leader made.)
	off, _, span := t.window(tr, now)
	want := tr.refRate * span.Seconds()
	d := math.Abs(off - want)
	c := t.cost(tr)
	// In decisions (units / c): |off − want| / c > Z·√(want / c).
	return d > t.cfg.Z*math.Sqrt(c*max(want, c)) && d > t.cfg.MinChange*want
}

// minLookDecisions is the fewest decisions a young tenant's window must
// count for its second look to be a step.
const minLookDecisions = 2

// decisions is how many decisions tr's window counted.
func (t *Tracker) decisions(tr *track) float64 {
	var dec float64
	for j := range trackerBuckets {
		dec += tr.bDec[j]
	}
	return dec
}

// cost is tr's mean units per decision over its window (1 without
// decisions counted).
func (t *Tracker) cost(tr *track) float64 {
	var off, dec float64
	for j := range trackerBuckets {
		off += tr.bOff[j]
		dec += tr.bDec[j]
	}
	if !(dec > 0) || !(off > dec) {
		return 1
	}
	return off / dec
}

// departs reports whether a Poisson count off departs from its expected
// count want by more than z standard deviations on Anscombe's square-root
// scale (2·√(x + 3/8) has variance about 1 at any mean): unlike the normal
// approximation, it is as sure of a fall to a few units as of a rise. A
// fall from 87/s to 10/s leaves 3 units in a 300 ms window where 26 were
// expected: 4.5 deviations of the normal approximation, 6.6 on this scale
// (a Poisson count of 26 falls to 3 with probability about 2·10⁻⁸).
func departs(off, want, z float64) bool {
	return 2*math.Abs(math.Sqrt(off+0.375)-math.Sqrt(max(want, 0)+0.375)) > z
}

// Steps returns how many tenants stepped since they were last reported.
func (t *Tracker) Steps() int { return len(t.stepped) }

// FirstSights returns how many of those steps are tenants seen for the
// first time: a pod holds no grant of such a tenant and enforces its cold
// floor until the leader answers, so their report should not wait out the
// least gap between steps.
func (t *Tracker) FirstSights() int { return t.firsts }

// TakeSteps returns the usage of an early report at now: each tenant that
// stepped, at its rate since the step (see stepRate) over interval, with
// Step set. Those tenants' counts for the next periodic report start again
// at now.
func (t *Tracker) TakeSteps(now time.Time) (usage map[string]Usage, interval time.Duration) {
	if len(t.stepped) == 0 {
		return nil, 0
	}
	interval = t.cfg.Window / 2
	usage = make(map[string]Usage, len(t.stepped))
	for _, name := range t.stepped {
		tr := t.tenants[name]
		t.roll(tr, now)
		off, adm, span, nb := t.stepRate(tr, now)
		f := interval.Seconds() / span.Seconds()
		usage[name] = Usage{Offered: off * f, Admitted: adm * f, Step: true}
		fell := !tr.young && t.fell(tr, now)
		t.setRef(tr, off/span.Seconds(), off, adm)
		switch {
		case !tr.young && now.Sub(tr.born) >= 2*t.cfg.Window:
			// A step seen in a few tens of milliseconds says its new
			// rate roughly: say it again over a whole Window of it.
			// It started about span ago: its older buckets counted
			// the old rate.
			tr.born, tr.young, tr.looks = now.Add(-span), true, 0
			for j := nb; j < trackerBuckets; j++ {
				k := (tr.cur - j + trackerBuckets) % trackerBuckets
				tr.bOff[k], tr.bAdm[k], tr.bDec[k] = 0, 0, 0
			}
		case !tr.young && tr.looks < maxLooks && fell:
			// A look whose Window saw the rate fall (demand that rose,
			// then left: a shift right after a step, or after a tenant's
			// first sight), which it counted in part. Look once more, a
			// Window from now, at traffic after it only.
			tr.born, tr.young = now, true
			tr.looks++
			clear(tr.bOff[:])
			clear(tr.bAdm[:])
			clear(tr.bDec[:])
		}
		tr.off, tr.adm, tr.start, tr.stepped, tr.fromStep = 0, 0, now, false, true
	}
	t.stepped, t.firsts = t.stepped[:0], 0
	return usage, interval
}

// maxLooks bounds the further looks a step's second look may lead to.
const maxLooks = 2

// fell reports whether tr's rate fell within its window: for some split,
// the newest buckets fall short of what the older ones predict, as a step
// departs (see isStep). (A rise within a window is a step at once; a fall
// to a few units a window may not be for many windows.)
func (t *Tracker) fell(tr *track, now time.Time) bool {
	c := t.cost(tr)
	var all float64
	for j := range trackerBuckets {
		all += tr.bOff[j]
	}
	part := now.Sub(tr.bStart)
	var newer float64
	for j := range trackerBuckets - 1 {
		newer += tr.bOff[(tr.cur-j+trackerBuckets)%trackerBuckets]
		spanNew := time.Duration(j)*t.bucket + part
		spanOld := time.Duration(trackerBuckets-1-j) * t.bucket
		if spanNew <= 0 {
			continue
		}
		want := (all - newer) * spanNew.Seconds() / spanOld.Seconds()
		if newer < want && departs(newer/c, want/c, t.cfg.Z) && want-newer > t.cfg.MinChange*want {
			return true
		}
	}
	return false
}

// stepRate returns tr's counts since its step, the span they cover and the
// buckets it spans: the
// newest buckets (at least one whole) whose offered count departs furthest
// from the reported rate, in standard deviations of a Poisson count. Only
// those say the new rate: older ones still count the old one. A tenant in
// its first Window counts all of it.
func (t *Tracker) stepRate(tr *track, now time.Time) (off, adm float64, span time.Duration, buckets int) {
	part := now.Sub(tr.bStart)
	if !tr.refSet {
		// First sight: its decisions say that it is here, hardly how
		// fast it comes. Its rate is taken over the time since the
		// last periodic report (which did not count it), and at least a
		// Window: a sparse key, seen once, does not read as a burst of
		// tens a second, and a busy one says its rate at its second
		// look, a Window later.
		off, adm, span = t.window(tr, now)
		return off, adm, max(span, now.Sub(t.lastFull), t.cfg.Window), trackerBuckets
	}
	if now.Sub(tr.born) < 2*t.cfg.Window {
		off, adm, span = t.window(tr, now)
		return off, adm, max(span, t.bucket), trackerBuckets
	}
	best := -1.0
	var o, a float64
	for j := range trackerBuckets {
		k := (tr.cur - j + trackerBuckets) % trackerBuckets
		o += tr.bOff[k]
		a += tr.bAdm[k]
		if j == 0 {
			continue // the bucket under way: too short alone
		}
		sp := time.Duration(j)*t.bucket + part
		want := tr.refRate * sp.Seconds()
		if z := math.Abs(o-want) / math.Sqrt(want+1); z > best {
			best, off, adm, span, buckets = z, o, a, sp, j+1
		}
	}
	return off, adm, span, buckets
}

func (t *Tracker) setRef(tr *track, rate, off, adm float64) {
	tr.refRate, tr.refSet = rate, true
	tr.refDeny = 0
	if off > 0 {
		tr.refDeny = 1 - adm/off
	}
}

// idleReports is how many periodic reports without traffic a tenant
// survives in a Tracker.
const idleReports = 3

// TakeAll returns the usage of a periodic report at now, over the interval
// since the last one: every tenant with traffic, each tenant's counts scaled
// to that interval (a tenant that stepped since counts from its step). A
// tenant that stepped less than a Window ago is reported at the rate its
// step report said and keeps counting. Tenants idle for three reports are
// forgotten.
func (t *Tracker) TakeAll(now time.Time) (usage map[string]Usage, interval time.Duration) {
	interval = max(now.Sub(t.lastFull), time.Microsecond)
	t.lastFull = now
	secs := interval.Seconds()
	usage = make(map[string]Usage, len(t.tenants))
	for name, tr := range t.tenants {
		span := now.Sub(tr.start)
		if tr.fromStep && span < t.cfg.Window {
			// Too short to say more than its step did.
			if tr.refRate > 0 {
				usage[name] = Usage{Offered: tr.refRate * secs, Admitted: tr.refRate * (1 - tr.refDeny) * secs}
			}
			continue
		}
		tr.fromStep = false
		if tr.off == 0 && tr.adm == 0 {
			tr.idle++
			if tr.idle >= idleReports && !tr.stepped {
				delete(t.tenants, name)
				continue
			}
			t.setRef(tr, 0, 0, 0)
			tr.start = now
			continue
		}
		f := secs / max(span, time.Microsecond).Seconds()
		usage[name] = Usage{Offered: tr.off * f, Admitted: tr.adm * f}
		t.setRef(tr, tr.off/max(span, time.Microsecond).Seconds(), tr.off, tr.adm)
		tr.off, tr.adm, tr.start = 0, 0, now
	}
	return usage, interval
}

// Tenants returns how many tenants the tracker counts.
func (t *Tracker) Tenants() int { return len(t.tenants) }
