package envoyxds

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/allot-dev/allot/policy/envoyconf"
)

// TypeURL is the type of the resources a Subscriber asks for.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// logEvery bounds how often connection trouble is logged above debug.
const logEvery = 30 * time.Second

// Subscriber follows an xDS management server's RateLimitConfig resources.
type Subscriber struct {
	cfg  Config
	log  *slog.Logger
	m    *metrics
	node *corev3.Node
	md   metadata.MD
	opts []grpc.DialOption

	running atomic.Bool

	mu      sync.Mutex
	version string // the last applied version_info

	// Only Run's goroutine touches these.
	rejected string // version and error of the last rejection logged
}

// New checks cfg and returns a Subscriber; Run starts it.
func New(cfg Config) (*Subscriber, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	creds := cfg.Creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if cfg.MaxMsgSize > 0 {
		opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(cfg.MaxMsgSize)))
	}
	// NewClient connects lazily: this checks the target and options only.
	conn, err := grpc.NewClient(cfg.ServerURL, opts...)
	if err != nil {
		return nil, fmt.Errorf("envoy xds config: ServerURL: %q: %w", cfg.ServerURL, err)
	}
	if err := conn.Close(); err != nil {
		return nil, fmt.Errorf("envoy xds config: ServerURL: %q: %w", cfg.ServerURL, err)
	}
	fields := make(map[string]*structpb.Value, len(cfg.NodeMetadata))
	for k, v := range cfg.NodeMetadata {
		fields[k] = structpb.NewStringValue(v)
	}
	s := &Subscriber{
		cfg:  cfg,
		log:  log.With("xds_server", cfg.ServerURL),
		m:    m,
		node: &corev3.Node{Id: cfg.NodeID, Metadata: &structpb.Struct{Fields: fields}, UserAgentName: "allot"},
		opts: opts,
	}
	if len(cfg.Headers) > 0 {
		s.md = metadata.New(cfg.Headers)
	}
	return s, nil
}

// Version returns the version_info of the last configuration applied, ""
// before the first.
func (s *Subscriber) Version() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

func (s *Subscriber) setVersion(v string) {
	s.mu.Lock()
	s.version = v
	s.mu.Unlock()
}

// Run follows the server until ctx ends, then returns nil once every
// goroutine it started has stopped. It calls apply, from its own
// goroutine, with each configuration the server sends that converts and
// builds; apply's error rejects it. A rejected configuration is NACKed
// and the last applied one stays; the server going away changes nothing
// until it is back: apply is never called with nil. A Subscriber runs
// once at a time.
func (s *Subscriber) Run(ctx context.Context, apply func(*envoyconf.Config) error) error {
	if apply == nil {
		return errors.New("envoy xds: Run: apply is nil")
	}
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("envoy xds: Run: already running")
	}
	defer s.running.Store(false)
	b := newBackoff(s.cfg)
	down := limiter{every: logEvery}
	up := limiter{every: logEvery}
	for {
		conn, err := grpc.NewClient(s.cfg.ServerURL, s.opts...)
		if err != nil {
			return fmt.Errorf("envoy xds: %s: %w", s.cfg.ServerURL, err)
		}
		received, err := s.session(ctx, conn, apply, &up)
		s.m.setConnected(false)
		_ = conn.Close() // a closing error changes nothing: the next try dials anew
		if ctx.Err() != nil {
			return nil
		}
		if received {
			b.reset()
		}
		s.m.retry()
		d := b.wait()
		level := slog.LevelDebug
		ok, held := down.allow(time.Now())
		if ok {
			level = slog.LevelWarn
		}
		s.log.Log(ctx, level, "xDS management server unavailable; the last applied configuration stays in force",
			"err", err, "retry_in", d, "applied_version", s.Version(), "similar_lines_not_logged", held)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// session runs one ADS stream on conn until it fails or ctx ends.
// received reports whether the server sent anything.
func (s *Subscriber) session(ctx context.Context, conn *grpc.ClientConn, apply func(*envoyconf.Config) error, up *limiter) (received bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream
	if len(s.md) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, s.md)
	}
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return false, fmt.Errorf("open the ADS stream: %w", err)
	}
	// The first request carries the version last applied, so that a
	// server that still has it may skip resending it.
	if err := s.send(stream, "", nil); err != nil {
		return false, err
	}
	s.m.setConnected(true)
	level := slog.LevelDebug
	if ok, _ := up.allow(time.Now()); ok {
		level = slog.LevelInfo
	}
	s.log.Log(ctx, level, "xDS stream open", "node_id", s.cfg.NodeID, "applied_version", s.Version())
	nacks := 0
	for {
		resp, err := stream.Recv()
		if err != nil {
			return received, fmt.Errorf("receive: %w", err)
		}
		received = true
		detail := s.update(ctx, resp, apply)
		if detail == nil {
			nacks = 0
		} else if nacks++; nacks > 1 {
			// A server that resends what was just rejected (the snapshot
			// cache answers a NACK with the same snapshot) would spin.
			t := time.NewTimer(s.cfg.RetryInterval)
			select {
			case <-ctx.Done():
				t.Stop()
				return received, ctx.Err()
			case <-t.C:
			}
		}
		if err := s.send(stream, resp.GetNonce(), detail); err != nil {
			return received, err
		}
	}
}

type adsStream = discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient

// send sends a request: an ACK of the version last applied, or with
// detail a NACK of the response with that nonce.
func (s *Subscriber) send(stream adsStream, nonce string, detail *status.Status) error {
	err := stream.Send(&discoveryv3.DiscoveryRequest{
		VersionInfo:   s.Version(),
		Node:          s.node,
		TypeUrl:       TypeURL,
		ResponseNonce: nonce,
		ErrorDetail:   detail,
	})
	if err == nil {
		return nil
	}
	if errors.Is(err, io.EOF) {
		// The stream ended; its status says why.
		if _, rerr := stream.Recv(); rerr != nil {
			err = rerr
		}
	}
	return fmt.Errorf("send: %w", err)
}

// update converts, builds and applies one response; it returns the NACK's
// detail, or nil when the response was applied.
func (s *Subscriber) update(ctx context.Context, resp *discoveryv3.DiscoveryResponse, apply func(*envoyconf.Config) error) *status.Status {
	version := resp.GetVersionInfo()
	cfg, err := s.convert(resp)
	if err == nil {
		if err = apply(cfg); err != nil {
			err = fmt.Errorf("apply: %w", err)
		}
	}
	if err != nil {
		s.m.update(false)
		level := slog.LevelDebug
		if key := version + "\x00" + err.Error(); key != s.rejected {
			s.rejected, level = key, slog.LevelError
		}
		s.log.Log(ctx, level, "rejected the xDS configuration (NACK); the last applied one stays in force",
			"version", version, "applied_version", s.Version(), "err", err)
		return &status.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
	}
	s.rejected = ""
	s.setVersion(version)
	s.m.update(true)
	n := len(resp.GetResources())
	if n == 0 {
		s.log.Warn("applied an xDS configuration of no RateLimitConfig: no domain has limits", "version", version)
	} else {
		s.log.Info("applied the xDS configuration", "version", version, "resources", n, "domains", len(cfg.Domains()), "limits", cfg.Limits())
	}
	return nil
}

// convert turns a response's resources into one Config: in name order,
// so that the same set gives the same Config and the same errors in
// whatever order the server lists them.
func (s *Subscriber) convert(resp *discoveryv3.DiscoveryResponse) (*envoyconf.Config, error) {
	if t := resp.GetTypeUrl(); t != TypeURL {
		return nil, fmt.Errorf("type_url %q: want %q", t, TypeURL)
	}
	type named struct {
		name string
		c    *rlsconfv3.RateLimitConfig
	}
	rs := make([]named, 0, len(resp.GetResources()))
	for i, a := range resp.GetResources() {
		c := new(rlsconfv3.RateLimitConfig)
		if err := a.UnmarshalTo(c); err != nil {
			return nil, fmt.Errorf("resources[%d]: %w", i, err)
		}
		name := "xds:" + c.GetName()
		if c.GetName() == "" {
			name = fmt.Sprintf("xds:resources[%d]", i)
		}
		rs = append(rs, named{name, c})
	}
	slices.SortStableFunc(rs, func(a, b named) int { return cmp.Compare(a.name, b.name) })
	files := make([]*envoyconf.File, 0, len(rs))
	for _, r := range rs {
		f, err := FromProto(r.name, r.c)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return envoyconf.Build(files, s.cfg.Merge)
}
