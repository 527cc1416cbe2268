package membership

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// ErrAlreadyRun is returned by a second call to Run.
var ErrAlreadyRun = errors.New("membership: Run already called")

// labelPrefix scopes memberlist's cluster label to allot's regions.
const labelPrefix = "allot-region:"

// Membership is one pod's view of its region's live pods.
type Membership struct {
	cfg  Config
	name string
	log  *slog.Logger
	met  *metrics

	started atomic.Bool
	leaving atomic.Bool // announced in node metadata before the leave
	// departing holds the peers that announced their leave, so that their
	// removal counts as a leave rather than a failure. Guarded by mu.
	mu        sync.Mutex
	departing map[string]bool
	noLeave   atomic.Bool // tests: stop as if the process died
	ready     chan struct{}
	addr      atomic.Pointer[string]
	ml        atomic.Pointer[memberlist.Memberlist]
}

// New validates and copies cfg. It starts nothing: Run binds, joins and
// gossips. Metrics are registered here, so a registration conflict is
// reported before anything runs.
func New(cfg Config) (*Membership, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Join = slices.Clone(cfg.Join)
	cfg.SecretKey = slices.Clone(cfg.SecretKey)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	name := cfg.NodeName
	if name == "" {
		name = defaultName()
	}
	met, err := newMetrics(cfg.Registerer, cfg.Region)
	if err != nil {
		return nil, err
	}
	m := &Membership{
		cfg:   cfg,
		name:  name,
		log:   cfg.Logger.With("region", cfg.Region, "node", name),
		met:   met,
		ready: make(chan struct{}),

		departing: map[string]bool{},
	}
	if err := met.registerHealth(cfg.Registerer, m); err != nil {
		return nil, err
	}
	return m, nil
}

// defaultName is the hostname with a random suffix: unique across restarts.
func defaultName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "pod"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return host + "-" + hex.EncodeToString(b[:])
}

// Name is this pod's node name (NodeName, or the generated default).
func (m *Membership) Name() string { return m.name }

// Ready is closed once Run has bound its address; Addr is then known. It
// stays open if Run fails to start.
func (m *Membership) Ready() <-chan struct{} { return m.ready }

// Addr is the IP:port other pods reach this one at, or "" before Ready.
func (m *Membership) Addr() string {
	if a := m.addr.Load(); a != nil {
		return *a
	}
	return ""
}

// LivePods is the number of live pods of the region this pod knows of,
// itself included: always at least 1, and exactly 1 while Run is not
// running. Suspect pods count as live until declared dead.
func (m *Membership) LivePods() int {
	ml := m.ml.Load()
	if ml == nil {
		return 1
	}
	return max(1, ml.NumMembers())
}

// Members returns the names of the live pods of the region, sorted, this
// pod included.
func (m *Membership) Members() []string {
	ml := m.ml.Load()
	if ml == nil {
		return []string{m.name}
	}
	var names []string
	for _, n := range ml.Members() {
		names = append(names, n.Name)
	}
	if !slices.Contains(names, m.name) {
		names = append(names, m.name)
	}
	slices.Sort(names)
	return names
}

// Run starts gossiping on BindAddr, joins the region through the seeds
// (retrying every JoinRetryInterval until one answers, then again every
// RejoinInterval), and when ctx ends leaves gracefully (within
// LeaveTimeout) and shuts memberlist down. A join in progress when ctx ends
// is finished first: up to TCPTimeout per seed address. It returns nil after a clean stop, or the error that kept memberlist
// from starting (an address in use, no private IP to advertise).
func (m *Membership) Run(ctx context.Context) error {
	if !m.started.CompareAndSwap(false, true) {
		return ErrAlreadyRun
	}
	ml, err := memberlist.Create(m.memberlistConfig())
	if err != nil {
		return fmt.Errorf("membership: start on %s: %w", m.cfg.BindAddr, err)
	}
	addr := ml.LocalNode().Address()
	m.addr.Store(&addr)
	m.ml.Store(ml)
	close(m.ready)
	m.log.Info("membership started", "addr", addr, "seeds", m.cfg.Join)
	defer m.stop(ml)

	if len(m.cfg.Join) == 0 {
		<-ctx.Done()
		return nil
	}
	t := time.NewTimer(0)
	defer t.Stop()
	joined := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		n, err := ml.Join(m.cfg.Join)
		m.met.join(n > 0)
		switch {
		case n > 0 && !joined:
			joined = true
			m.log.Info("joined region", "seeds_answered", n, "live_pods", m.LivePods())
		case n > 0:
			m.log.Debug("rejoined seeds", "seeds_answered", n, "live_pods", m.LivePods())
		case joined:
			m.log.Warn("rejoin: no seed answered", "seeds", m.cfg.Join, "err", err)
		default:
			m.log.Warn("join: no seed answered, retrying", "seeds", m.cfg.Join, "retry_in", m.cfg.JoinRetryInterval, "err", err)
		}
		switch {
		case !joined:
			t.Reset(m.cfg.JoinRetryInterval)
		case m.cfg.RejoinInterval > 0:
			t.Reset(m.cfg.RejoinInterval)
		default:
			<-ctx.Done()
			return nil
		}
	}
}

// stop leaves (bounded by LeaveTimeout) and shuts memberlist down.
func (m *Membership) stop(ml *memberlist.Memberlist) {
	m.ml.Store(nil)
	if !m.noLeave.Load() {
		// Announce the departure in the metadata first, so the others
		// count it as a leave, not a failure; then leave.
		// Both broadcasts together are bounded by LeaveTimeout.
		deadline := time.Now().Add(m.cfg.LeaveTimeout)
		m.leaving.Store(true)
		if err := ml.UpdateNode(m.cfg.LeaveTimeout); err != nil {
			m.log.Debug("announce leave", "err", err)
		}
		// Leave(0) would wait forever: keep at least a millisecond.
		if err := ml.Leave(max(time.Until(deadline), time.Millisecond)); err != nil {
			m.log.Warn("leave: the other pods will notice through probes instead", "err", err)
		}
	}
	if err := ml.Shutdown(); err != nil {
		m.log.Warn("memberlist shutdown", "err", err)
	}
	m.log.Info("membership stopped")
}

func (m *Membership) memberlistConfig() *memberlist.Config {
	c := m.cfg
	mc := memberlist.DefaultLANConfig()
	mc.Name = m.name
	mc.BindAddr, mc.BindPort, _ = splitBind(c.BindAddr)
	mc.AdvertisePort = mc.BindPort
	if ip, port, _ := splitAdvertise(c.AdvertiseAddr); ip != "" {
		mc.AdvertiseAddr = ip
		if port != 0 {
			mc.AdvertisePort = port
		}
	}
	mc.Label = labelPrefix + c.Region
	if len(c.SecretKey) > 0 {
		mc.SecretKey = slices.Clone(c.SecretKey)
	}
	mc.ProbeInterval, mc.ProbeTimeout = c.ProbeInterval, c.ProbeTimeout
	mc.IndirectChecks = c.IndirectChecks
	mc.SuspicionMult, mc.SuspicionMaxTimeoutMult = c.SuspicionMult, c.SuspicionMaxTimeoutMult
	mc.AwarenessMaxMultiplier = c.AwarenessMaxMultiplier
	mc.GossipInterval, mc.GossipNodes = c.GossipInterval, c.GossipNodes
	mc.RetransmitMult = c.RetransmitMult
	mc.GossipToTheDeadTime = c.GossipToTheDeadTime
	mc.PushPullInterval = c.PushPullInterval
	mc.TCPTimeout = c.TCPTimeout
	// A pod restarted under the same name at a new address may take its
	// name back shortly after its predecessor was declared dead.
	mc.DeadNodeReclaimTime = c.ProbeInterval
	mc.Logger = newStdLogger(m.log.With("component", "memberlist"))
	mc.Events = events{m}
	mc.Delegate = delegate{m}
	return mc
}

// Node metadata: one byte, metaLeaving once this pod is leaving.
const (
	metaAlive   byte = 0
	metaLeaving byte = 1
)

// delegate publishes this pod's metadata; allot sends no user messages.
// memberlist may call it concurrently; it only reads an atomic.
type delegate struct{ m *Membership }

// NodeMeta implements memberlist.Delegate.
func (d delegate) NodeMeta(int) []byte {
	if d.m.leaving.Load() {
		return []byte{metaLeaving}
	}
	return []byte{metaAlive}
}

// NotifyMsg implements memberlist.Delegate.
func (delegate) NotifyMsg([]byte) {}

// GetBroadcasts implements memberlist.Delegate.
func (delegate) GetBroadcasts(int, int) [][]byte { return nil }

// LocalState implements memberlist.Delegate.
func (delegate) LocalState(bool) []byte { return nil }

// MergeRemoteState implements memberlist.Delegate.
func (delegate) MergeRemoteState([]byte, bool) {}

// events counts and logs membership changes. memberlist calls it with its
// node lock held, so it must not call back into memberlist or block.
type events struct{ m *Membership }

// NotifyJoin implements memberlist.EventDelegate.
func (e events) NotifyJoin(n *memberlist.Node) {
	if n.Name == e.m.name {
		return
	}
	e.m.setDeparting(n.Name, false)
	e.m.met.event("join")
	e.m.log.Info("pod joined", "pod", n.Name, "pod_addr", n.Address())
}

// NotifyLeave implements memberlist.EventDelegate.
func (e events) NotifyLeave(n *memberlist.Node) {
	if n.Name == e.m.name {
		return
	}
	// memberlist does not say whether the node left or was declared dead
	// (the Node it passes carries no state); a graceful leave announced
	// itself in the metadata first.
	if e.m.setDeparting(n.Name, false) {
		e.m.met.event("leave")
		e.m.log.Info("pod left", "pod", n.Name, "pod_addr", n.Address())
		return
	}
	e.m.met.event("fail")
	e.m.log.Warn("pod failed", "pod", n.Name, "pod_addr", n.Address())
}

// NotifyUpdate implements memberlist.EventDelegate.
func (e events) NotifyUpdate(n *memberlist.Node) {
	if n.Name == e.m.name {
		return
	}
	if len(n.Meta) > 0 && n.Meta[0] == metaLeaving {
		e.m.setDeparting(n.Name, true)
		return
	}
	e.m.met.event("update")
}

// setDeparting records whether peer announced its leave and returns what
// was recorded before.
func (m *Membership) setDeparting(peer string, v bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	was := m.departing[peer]
	if v {
		m.departing[peer] = true
	} else {
		delete(m.departing, peer)
	}
	return was
}
