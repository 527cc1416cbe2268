package sim

import (
	"fmt"
	"strings"
	"time"

	"github.com/allot-dev/allot/shares"
)

// Reference parameters of every scenario unless it says otherwise
// (RESEARCH.md, "Targets worth beating").
const (
	RefRate     = 1000.0 // R, units per second
	RefBurst    = 200    // B
	RefInterval = 2 * time.Second
	RefLease    = 10 * time.Second
	RefDrift    = 250 * time.Millisecond
)

// The three regions of every scenario.
const (
	USEast  = "us-east"
	EUWest  = "eu-west"
	APSouth = "ap-south"
)

var defaultModes = []shares.Mode{shares.ModeRebalanced, shares.ModeStatic, shares.ModeFull}

// base is the reference setup: R = 1000/s, B = 200, three regions of two
// pods each, P = 2 s, L = 10 s, WAN delays (each message 50–150 ms), two
// minutes simulated with a ten-second warm-up.
func base(name, desc string) *Spec {
	return &Spec{
		Name:        name,
		Description: desc,
		Regions:     []string{USEast, EUWest, APSouth},
		Budget:      shares.Budget{Rate: RefRate, Burst: RefBurst},
		Modes:       append([]shares.Mode(nil), defaultModes...),
		Interval:    RefInterval,
		Lease:       RefLease,
		Drift:       RefDrift,
		Duration:    120 * time.Second,
		Warmup:      10 * time.Second,
		Network:     WAN(),
	}
}

// WAN is the reference network: every message between a pod and the
// coordinator takes 50 to 150 ms (uniform), as between continents.
func WAN() Network {
	return Network{
		Report:  Jitter{Min: 50 * time.Millisecond, Max: 150 * time.Millisecond},
		Renewal: Jitter{Min: 50 * time.Millisecond, Max: 150 * time.Millisecond},
	}
}

// Slow is a pessimistic network: every message takes from 1 ms to a whole
// interval p (uniform).
func Slow(p time.Duration) Network {
	return Network{
		Report:  Jitter{Min: time.Millisecond, Max: p},
		Renewal: Jitter{Min: time.Millisecond, Max: p},
	}
}

// Networks names the network models `allot sim --network` offers.
var Networks = []string{"wan", "slow"}

// UseNetwork sets s's message delays to the model called name ("wan" or
// "slow"; a scenario's losses stay).
func (s *Spec) UseNetwork(name string) error {
	loss := s.Network.LossReports
	switch name {
	case "wan":
		s.Network = WAN()
	case "slow":
		s.Network = Slow(s.Interval)
	default:
		return bad("Network", "unknown model %q (valid: %s)", name, strings.Join(Networks, ", "))
	}
	s.Network.LossReports = loss
	return nil
}

func poisson(p Profile) Traffic { return Traffic{Profile: p, Process: Poisson} }

// shiftAt is when the shift scenarios move their demand: halfway through
// shiftRun. Three minutes keep the unavoidable cost of one shift (shrink,
// acknowledge, grow: a few seconds with delays of up to P) a small part of
// the run, as in a long-running system with a shift every few minutes.
const (
	shiftRun = 180 * time.Second
	shiftAt  = shiftRun / 2
)

// shiftBase is base for the shift scenarios.
func shiftBase(name, desc string, total float64) *Spec {
	s := base(name, desc)
	s.Duration = shiftRun
	s.Traffic = shift(total, shiftAt)
	s.Events = []time.Duration{shiftAt}
	return s
}

// shift is the skew-shift demand: total·70/20/10 % moving to 10/20/70 % at at.
func shift(total float64, at time.Duration) map[string]Traffic {
	return map[string]Traffic{
		USEast:  poisson(Step(0.7*total, 0.1*total, at)),
		EUWest:  poisson(Constant(0.2 * total)),
		APSouth: poisson(Step(0.1*total, 0.7*total, at)),
	}
}

// skewShift: 1.5 R offered 70/20/10 % shifting to 10/20/70 % halfway.
func skewShift() *Spec {
	return shiftBase("skew-shift", "1.5R offered 70/20/10% across us-east/eu-west/ap-south, shifting to 10/20/70% at 90s", 1.5*RefRate)
}

// underload: 0.6 R offered 60/30/10 %, steady.
func underload() *Spec {
	s := base("underload", "0.6R offered 60/30/10%, steady: nothing should be denied")
	s.Duration = 90 * time.Second
	s.Traffic = map[string]Traffic{
		USEast:  poisson(Constant(0.36 * RefRate)),
		EUWest:  poisson(Constant(0.18 * RefRate)),
		APSouth: poisson(Constant(0.06 * RefRate)),
	}
	return s
}

// flashCrowd: 0.6 R spread 50/33/17 %, then ap-south gains 0.9 R within two
// seconds for 30 s.
func flashCrowd() *Spec {
	s := base("flash-crowd", "0.6R offered 300/200/100/s; ap-south jumps by +900/s at 40s for 30s")
	s.Duration = 100 * time.Second
	s.Traffic = map[string]Traffic{
		USEast:  poisson(Constant(300)),
		EUWest:  poisson(Constant(200)),
		APSouth: poisson(FlashCrowd(100, 900, 40*time.Second, 2*time.Second, 30*time.Second)),
	}
	s.Events = []time.Duration{40 * time.Second, 70 * time.Second}
	return s
}

// partitionDuringShift: skew-shift with us-east (the region that must
// shrink) cut off from the coordinator from 80 s to 110 s.
func partitionDuringShift() *Spec {
	s := shiftBase("partition", "skew-shift with us-east cut off from the coordinator from 80s to 110s (shift at 90s)", 1.5*RefRate)
	s.Partitions = []Partition{{Region: USEast, From: 80 * time.Second, To: 110 * time.Second}}
	// The ideal split cannot be reached while us-east is cut off, so
	// convergence is measured from the heal.
	s.Events = []time.Duration{110 * time.Second}
	return s
}

// leaderFailover: skew-shift with the leader lost at 88 s and a new term
// starting at 91 s (an election session TTL of 3 s), which learns for
// L + TTL = 13 s before it renews or grants anything.
func leaderFailover() *Spec {
	s := shiftBase("failover", "skew-shift with the leader killed at 88s; a new term starts at 91s and learns for L + TTL = 13s (shift at 90s)", 1.5*RefRate)
	s.Failovers = []Failover{{At: 88 * time.Second, Gap: 3 * time.Second, SessionTTL: 3 * time.Second}}
	return s
}

// bursts: on/off traffic out of phase across regions.
func bursts() *Spec {
	s := base("bursts", "on/off: us-east 1500/s 5s on 5s off, eu-west 1000/s 3s on 7s off (phase 2s), ap-south 200/s steady")
	s.Traffic = map[string]Traffic{
		USEast:  poisson(OnOff(1500, 5*time.Second, 5*time.Second, 0)),
		EUWest:  poisson(OnOff(1000, 3*time.Second, 7*time.Second, 2*time.Second)),
		APSouth: poisson(Constant(200)),
	}
	return s
}

// retryStorm: skew-shift at 1.2 R of fresh demand whose clients retry
// denials up to three times (backoff 200 ms doubling, honouring
// retry-after, ±50 % jitter), so offered load grows with denials.
func retryStorm() *Spec {
	s := shiftBase("retry-storm", "skew-shift at 1.2R whose clients retry each 429 up to 3 times (200ms doubling, honour retry-after, ±50% jitter)", 1.2*RefRate)
	s.Retry = &Retry{Attempts: 3, Base: 200 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.5, HonourRetryAfter: true}
	return s
}

// pinned: a tenant pinned to us-east while 0.4 R arrives elsewhere.
func pinned() *Spec {
	s := base("pinned", "tenant pinned to us-east (700/s) while eu-west (300/s) and ap-south (100/s) also get traffic")
	s.Duration = 60 * time.Second
	s.Budget.Home = USEast
	s.Modes = []shares.Mode{shares.ModePinned, shares.ModeRebalanced}
	s.Traffic = map[string]Traffic{
		USEast:  poisson(Constant(700)),
		EUWest:  poisson(Constant(300)),
		APSouth: poisson(Constant(100)),
	}
	return s
}

// followTheSun: the skew-shift demand moving linearly over a minute.
func followTheSun() *Spec {
	s := base("ramp", "1.5R moving linearly from 70/20/10% to 10/20/70% between 30s and 90s (follow the sun)")
	s.Traffic = map[string]Traffic{
		USEast:  poisson(Ramp(1050, 150, 30*time.Second, 90*time.Second)),
		EUWest:  poisson(Constant(300)),
		APSouth: poisson(Ramp(150, 1050, 30*time.Second, 90*time.Second)),
	}
	s.Events = []time.Duration{30 * time.Second, 90 * time.Second}
	return s
}

// diurnalDay: three sinusoidal days a third of a cycle apart, 1.2 R on
// average.
func diurnalDay() *Spec {
	s := base("diurnal", "three regions 400±350/s sinusoids 120° apart (a 2-minute day), 1.2R on average")
	s.Duration = 180 * time.Second
	period := 120 * time.Second
	s.Traffic = map[string]Traffic{
		USEast:  poisson(Diurnal(400, 350, period, 0)),
		EUWest:  poisson(Diurnal(400, 350, period, period/3)),
		APSouth: poisson(Diurnal(400, 350, period, 2*period/3)),
	}
	return s
}

// noise: long stationary overload, to count the grant changes noise causes.
func noise() *Spec {
	s := base("noise", "1.2R steady Poisson noise 50/30/20% for 5 minutes: grant changes should stay near zero")
	s.Duration = 300 * time.Second
	s.Traffic = map[string]Traffic{
		USEast:  poisson(Constant(600)),
		EUWest:  poisson(Constant(360)),
		APSouth: poisson(Constant(240)),
	}
	return s
}

// lossyReports: skew-shift with 20 % of reports lost.
func lossyReports() *Spec {
	s := shiftBase("lossy", "skew-shift with 20% of reports lost", 1.5*RefRate)
	s.Network.LossReports = 0.2
	return s
}

// tokensShift: skew-shift on a tenant with two budgets, requests (R) and
// tokens (20,000/s, burst 4,000) at 40 tokens a request: tokens bind first
// (500 requests/s), and each budget is shared on its own as demand moves.
func tokensShift() *Spec {
	s := shiftBase("tokens", "skew-shift on requests (1000/s) and tokens (20,000/s, 40 a request): tokens bind first, at 500 requests/s", 1.5*RefRate)
	s.Tokens = &Tokens{Budget: shares.Budget{Rate: 20_000, Burst: 4_000}, PerRequest: 40}
	return s
}

// manyUsers: skew-shift at 0.9R spread over 10,000 users by a Zipf law
// (s = 1; the busiest sends 9% of the requests), each user with a global
// per-user limit of 5/s burst 10 shared key by key: about twenty of the busiest
// bind in every region at once, and every user's share follows the shift.
func manyUsers() *Spec {
	s := shiftBase("users", "skew-shift at 0.9R over 10,000 users (Zipf s=1), each with a global per-user limit of 5/s burst 10: about twenty of the busiest bind", 0.9*RefRate)
	s.Users = &Users{Count: 10_000, Budget: shares.Budget{Rate: 5, Burst: 10}, Zipf: 1}
	return s
}

var catalogue = []func() *Spec{
	skewShift, underload, flashCrowd, partitionDuringShift, leaderFailover, bursts,
	retryStorm, pinned, followTheSun, diurnalDay, noise, lossyReports, tokensShift,
	manyUsers,
}

// Scenarios returns a fresh copy of every scenario, in a fixed order.
func Scenarios() []*Spec {
	out := make([]*Spec, len(catalogue))
	for i, f := range catalogue {
		out[i] = f()
	}
	return out
}

// Names returns the scenario names in order.
func Names() []string {
	var out []string
	for _, s := range Scenarios() {
		out = append(out, s.Name)
	}
	return out
}

// Lookup returns a fresh copy of the scenario called name.
func Lookup(name string) (*Spec, error) {
	for _, s := range Scenarios() {
		if s.Name == name {
			return s, nil
		}
	}
	return nil, fmt.Errorf("%w %q (valid: %s)", ErrUnknownScenario, name, strings.Join(Names(), ", "))
}
