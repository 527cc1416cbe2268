package sim

import (
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"time"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/shares"
)

// Users is a scenario's population of users (Spec.Users): each request of
// the tenant comes from one of Count users, picked by a Zipf law (user u,
// from 0, with weight 1/(u+1)^Zipf) independently of its region, so that
// every busy user is busy in every region. Each user's requests also spend
// the user's own global per-key limit (shares.KeyBudgetID, limit UserLimit)
// of Budget, shared across regions key by key; a request is admitted only
// when the tenant's budget and its user's both admit it, here and in the
// central limiter it is compared with.
type Users struct {
	Count  int
	Budget shares.Budget // Run overrides its Mode, as the tenant budget's
	Zipf   float64
}

// UserLimit is the name of the per-user global limit of Spec.Users.
const UserLimit = "user"

// UserID is the budget ID of user u's share of the per-user limit.
func UserID(u int) string { return shares.KeyBudgetID(Tenant, UserLimit, "u"+strconv.Itoa(u)) }

// maxUsers bounds Users.Count.
const maxUsers = 1_000_000

// heavyTracked is how many of the busiest users (the lowest indices) have
// their admissions recorded, for the windowed over-admission check.
const heavyTracked = 20

// UsersResult is what a run measured of Spec.Users.
type UsersResult struct {
	Count int
	Rate  float64
	Burst int64
	// Seen counts the users that sent at least one request.
	Seen int
	// Bound is how many users the central limiter denied at least once
	// after the warm-up: those whose demand exceeded their limit.
	Bound int
	// PeakRateSum and PeakBurstSum are the largest sums over regions of
	// the largest rate (and burst) any pod of the region enforced for one
	// user, at one instant (I4 for every user's limit), over the whole run.
	PeakRateSum  float64
	PeakBurstSum int64
	// RunMargin is the largest of a user's admissions over the whole run
	// less R·t + B (negative: every user stayed under its bound by at
	// least −RunMargin units).
	RunMargin float64
	// OverAdmission is the worst excess over every window of the
	// heaviest users (Windows; their admissions are recorded).
	OverAdmission Excess
	// HeavyAdmitted and HeavyIdeal count the heaviest user's admissions by
	// allot and by the central limiter after the warm-up.
	HeavyAdmitted, HeavyIdeal int64
	// UnderOffered and UnderDenied count, after the warm-up, the requests
	// of the users the central limiter never denied (those under their
	// limit) and how many of them allot denied: false 429s.
	UnderOffered, UnderDenied int64
	// PeakIDs is the largest number of budget IDs the leader held at a
	// rebalance (the tenant's, its users' that are active or not yet
	// forgotten); MeanIDs their mean over the rebalances after the
	// warm-up.
	PeakIDs int
	MeanIDs float64
	// UsageEntries counts the per-ID usage entries the pods' reports
	// carried over the run; Reports the reports.
	UsageEntries, Reports int64
}

// userWorld is the users' part of the world.
type userWorld struct {
	budget shares.Budget
	ids    []string
	index  map[string]int
	cdf    []float64
	rng    *rand.Rand
	climit gcra.Limit
	// central is each user's state in the central limiter.
	central []gcra.State
	// keys[region][user] is each region's key of each user.
	keys [][]gcra.State
	// own[region] is the user's floor by the pods' own reading.
	own []shares.Ceiling
	// eff[pod][user] is what each pod enforces for each user.
	eff [][]enforced
	// admitted counts each user's admissions over the whole run.
	admitted []int64
	// offered and denied count each user's requests after the warm-up.
	offered, denied []int32
	seen            []bool
	seenList        []int
	bound           []bool
	heavy           [heavyTracked][]int64
	idsSum          float64
	idsN            int
	res             *UsersResult
}

func newUserWorld(w *world, u *Users, mode shares.Mode, seed uint64) (*userWorld, error) {
	b := u.Budget
	b.Mode, b.Home = mode, ""
	if mode == shares.ModePinned {
		b.Mode = shares.ModeRebalanced
	}
	cl, err := gcra.FromPerSecond(b.Rate, b.Burst)
	if err != nil {
		return nil, err
	}
	uw := &userWorld{
		budget:   b,
		ids:      make([]string, u.Count),
		index:    make(map[string]int, u.Count),
		cdf:      make([]float64, u.Count),
		rng:      rand.New(rand.NewPCG(seed, 0x7573657273)),
		climit:   cl,
		central:  make([]gcra.State, u.Count),
		keys:     make([][]gcra.State, len(w.spec.Regions)),
		own:      make([]shares.Ceiling, len(w.spec.Regions)),
		admitted: make([]int64, u.Count),
		offered:  make([]int32, u.Count),
		denied:   make([]int32, u.Count),
		seen:     make([]bool, u.Count),
		bound:    make([]bool, u.Count),
		res:      &UsersResult{Count: u.Count, Rate: b.Rate, Burst: b.Burst, RunMargin: math.Inf(-1)},
	}
	var sum float64
	for i := range u.Count {
		uw.ids[i] = UserID(i)
		uw.index[uw.ids[i]] = i
		sum += math.Pow(float64(i+1), -u.Zipf)
		uw.cdf[i] = sum
	}
	for i := range uw.cdf {
		uw.cdf[i] /= sum
	}
	for i, name := range w.spec.Regions {
		uw.keys[i] = make([]gcra.State, u.Count)
		r, bu := shares.Floor(b, w.cfg.Regions, name)
		uw.own[i] = shares.Ceiling{Rate: r, Burst: bu}
	}
	return uw, nil
}

// addPods makes the per-pod state of n pods.
func (uw *userWorld) addPods(n int) {
	uw.eff = make([][]enforced, n)
	for k := range uw.eff {
		uw.eff[k] = make([]enforced, len(uw.ids))
	}
}

// pick draws the user of a fresh arrival.
func (uw *userWorld) pick() int {
	x := uw.rng.Float64()
	u := sort.SearchFloat64s(uw.cdf, x)
	return min(u, len(uw.cdf)-1)
}

// classDefault is the per-user limit's budget as the leader's default of
// the limit's class (every user ID takes it).
func (uw *userWorld) classDefault() *shares.Budget {
	b := uw.budget
	return &b
}

// enforceUser refreshes what pod k enforces for user u at t.
func (w *world) enforceUser(k, u int, t int64) *enforced {
	uw := w.users
	ps := w.pods[k]
	e := &uw.eff[k][u]
	refresh(e, ps.st, w.at(t), uw.ids[u], uw.own[ps.region])
	return e
}

// checkUser refreshes every pod's enforcement of user u at t and records
// the user's Σ over regions (I4 for its limit).
func (w *world) checkUser(u int, t int64) {
	var rate float64
	var burst int64
	for _, rs := range w.regions {
		var r float64
		var b int64
		for _, k := range rs.pods {
			e := w.enforceUser(k, u, t)
			r, b = max(r, e.rate), max(b, e.burst)
		}
		rate += r
		burst += b
	}
	ur := w.users.res
	if rate > ur.PeakRateSum || burst > ur.PeakBurstSum {
		if rate > ur.Rate*(1+1e-9) || burst > ur.Burst {
			w.tracef(t, "I4 exceeded for user %d: Σ rate %.3f, Σ burst %d", u, rate, burst)
		}
		ur.PeakRateSum, ur.PeakBurstSum = max(ur.PeakRateSum, rate), max(ur.PeakBurstSum, burst)
	}
}

// checkUsers checks every user seen so far (at each sample).
func (w *world) checkUsers(t int64) {
	if w.users == nil {
		return
	}
	for _, u := range w.users.seenList {
		w.checkUser(u, t)
	}
}

// checkUserEntries checks the users an answer changed.
func (w *world) checkUserEntries(entries []shares.Entry, t int64) {
	uw := w.users
	if uw == nil {
		return
	}
	for _, e := range entries {
		if u, ok := uw.index[e.Tenant]; ok && uw.seen[u] {
			w.checkUser(u, t)
		}
	}
}

// userCentral is the central limiter's decision of user u's arrival at t:
// the state to keep if it is allowed.
func (uw *userWorld) userCentral(u int, t, off int64) (gcra.State, bool) {
	ns, r, _ := gcra.DecideMicros(uw.central[u], off+t, uw.climit, 1)
	return ns, r.Allowed
}

// meetUser notes user u's arrival at t and checks its Σ over regions
// first (every pod refreshed).
func (w *world) meetUser(u int, t int64) {
	uw := w.users
	if !uw.seen[u] {
		uw.seen[u] = true
		uw.seenList = append(uw.seenList, u)
	}
	w.checkUser(u, t)
}

// decideUser decides user u's arrival at region i through pod k at t: the
// key's state to keep if it is allowed.
func (w *world) decideUser(i, k, u int, t int64) (gcra.State, bool, time.Duration) {
	uw := w.users
	e := &uw.eff[k][u]
	if !e.ok {
		return gcra.State{}, false, time.Second
	}
	ns, r, _ := gcra.DecideMicros(uw.keys[i][u], w.off+t, e.limit, 1)
	return ns, r.Allowed, r.RetryAfter
}

// admitUser counts user u's admission at t.
func (uw *userWorld) admitUser(u int, t int64) {
	uw.admitted[u]++
	if u < heavyTracked {
		uw.heavy[u] = append(uw.heavy[u], t)
	}
}

// observeIDs records the leader's budget IDs at a rebalance at t.
func (w *world) observeIDs(t int64) {
	uw := w.users
	if uw == nil || w.leader == nil {
		return
	}
	n := w.leader.Tenants()
	uw.res.PeakIDs = max(uw.res.PeakIDs, n)
	if t >= w.warm {
		uw.idsSum += float64(n)
		uw.idsN++
	}
}

// finishUsers fills the users' result.
func (w *world) finishUsers() {
	uw := w.users
	if uw == nil {
		return
	}
	ur := uw.res
	ur.Seen = len(uw.seenList)
	for u, b := range uw.bound {
		if b {
			ur.Bound++
			continue
		}
		ur.UnderOffered += int64(uw.offered[u])
		ur.UnderDenied += int64(uw.denied[u])
	}
	most := ur.Rate*w.spec.Duration.Seconds() + float64(ur.Burst)
	for _, a := range uw.admitted {
		ur.RunMargin = max(ur.RunMargin, float64(a)-most)
	}
	for u := range heavyTracked {
		if u >= len(uw.ids) {
			break
		}
		if _, worst := overAdmission(uw.heavy[u], ur.Rate, ur.Burst); worst.Units > ur.OverAdmission.Units {
			ur.OverAdmission = worst
		}
	}
	if uw.idsN > 0 {
		ur.MeanIDs = uw.idsSum / float64(uw.idsN)
	}
	w.res.Users = ur
}
