package state

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/allot-dev/allot/policy"
)

// Kinds of mirrored records, as DecodeError.Kind and the kind label of
// allot_state_decode_errors_total name them.
const (
	KindBudget = "budget"
	KindPolicy = "policy"
)

// DecodeError is a mirrored record that did not decode. The mirror reports
// it and goes on with the other records (see BudgetMirror and PolicyMirror
// for what stands in its place).
type DecodeError struct {
	// Kind is what the record should be: KindBudget or KindPolicy.
	Kind string
	// Key is the record's etcd key; Rev the revision that wrote it.
	Key string
	Rev int64
	Err error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("%s record %s (revision %d): %v", e.Kind, e.Key, e.Rev, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// MirrorConfig configures a typed mirror (BudgetMirror, PolicyMirror).
type MirrorConfig struct {
	// Retry is the wait before reading everything again after the watch
	// could not continue (compaction, a lost watch, etcd out of reach).
	Retry time.Duration
	// OnDecodeError, if set, is called with every record that fails to
	// decode, from the mirror's goroutine and never during a handler call.
	OnDecodeError func(*DecodeError)
	// OnResync, if set, is called with the error that made the mirror
	// read everything again.
	OnResync func(error)
	// Registerer, if set, gets allot_state_decode_errors_total{kind}.
	// Mirrors sharing a registry (several services of one process) share
	// the counter.
	Registerer prometheus.Registerer
}

// DefaultMirrorConfig retries once a second and reports nowhere.
func DefaultMirrorConfig() MirrorConfig { return MirrorConfig{Retry: time.Second} }

// Validate names the field of a bad setting.
func (c MirrorConfig) Validate() error {
	if c.Retry <= 0 {
		return fmt.Errorf("mirror config: Retry %v: want a positive wait, e.g. 1s", c.Retry)
	}
	return nil
}

// decoder is what both typed mirrors share: the store, the config and the
// counter of decode errors.
type decoder struct {
	store *Store
	kind  string
	cfg   MirrorConfig
	errs  prometheus.Counter // nil without a Registerer
}

func newDecoder(store *Store, kind string, cfg MirrorConfig) (decoder, error) {
	if store == nil {
		return decoder{}, errors.New("mirror: no store")
	}
	if err := cfg.Validate(); err != nil {
		return decoder{}, err
	}
	errs, err := decodeErrors(cfg.Registerer, kind)
	if err != nil {
		return decoder{}, err
	}
	return decoder{store: store, kind: kind, cfg: cfg, errs: errs}, nil
}

// failed reports a record that did not decode.
func (d *decoder) failed(key []byte, rev int64, err error) {
	if d.errs != nil {
		d.errs.Inc()
	}
	if d.cfg.OnDecodeError != nil {
		d.cfg.OnDecodeError(&DecodeError{Kind: d.kind, Key: string(key), Rev: rev, Err: err})
	}
}

func (d *decoder) run(ctx context.Context, prefix string, h MirrorHandler) error {
	return Mirror(ctx, d.store.Client(), prefix, h, d.cfg.Retry, d.cfg.OnResync)
}

// BudgetHandler receives the budget records a BudgetMirror decoded, in
// revision order; calls never overlap. rev is the etcd revision of the
// change (of the read, for ResetBudgets).
type BudgetHandler interface {
	// ResetBudgets replaces every record: those under the prefix that
	// decode, by tenant. The handler owns recs.
	ResetBudgets(recs map[string]BudgetRecord, rev int64)
	// PutBudget: a tenant's record was written.
	PutBudget(rec BudgetRecord, rev int64)
	// DeleteBudget: a tenant's record was deleted.
	DeleteBudget(tenant string, rev int64)
}

// BudgetMirror keeps a BudgetHandler in step with the budget records in
// etcd. A record that fails to decode is reported (MirrorConfig's
// OnDecodeError and the counter) and left out: a resync hands over the
// others, and a write that does not decode leaves the handler's last
// record of that tenant in force.
type BudgetMirror struct {
	d decoder
	h BudgetHandler
}

// NewBudgetMirror returns a mirror of store's budget records into h. Run
// runs it.
func NewBudgetMirror(store *Store, h BudgetHandler, cfg MirrorConfig) (*BudgetMirror, error) {
	if h == nil {
		return nil, errors.New("budget mirror: no handler")
	}
	d, err := newDecoder(store, KindBudget, cfg)
	if err != nil {
		return nil, fmt.Errorf("budget mirror: %w", err)
	}
	return &BudgetMirror{d: d, h: h}, nil
}

// Run mirrors until ctx ends, and returns ctx's error.
func (m *BudgetMirror) Run(ctx context.Context) error {
	return m.d.run(ctx, m.d.store.BudgetsPrefix(), budgetFeed{m})
}

// budgetFeed decodes what Mirror hands over.
type budgetFeed struct{ m *BudgetMirror }

func (f budgetFeed) Reset(kvs []*mvccpb.KeyValue, rev int64) {
	recs := make(map[string]BudgetRecord, len(kvs))
	for _, kv := range kvs {
		rec, err := DecodeBudget(kv.Value)
		if err != nil {
			f.m.d.failed(kv.Key, kv.ModRevision, err)
			continue
		}
		recs[rec.Tenant] = rec
	}
	f.m.h.ResetBudgets(recs, rev)
}

func (f budgetFeed) Put(kv *mvccpb.KeyValue) {
	rec, err := DecodeBudget(kv.Value)
	if err != nil {
		f.m.d.failed(kv.Key, kv.ModRevision, err)
		return
	}
	f.m.h.PutBudget(rec, kv.ModRevision)
}

func (f budgetFeed) Delete(kv *mvccpb.KeyValue) {
	tenant, err := f.m.d.store.BudgetTenant(kv.Key)
	if err != nil {
		f.m.d.failed(kv.Key, kv.ModRevision, err)
		return
	}
	f.m.h.DeleteBudget(tenant, kv.ModRevision)
}

// PolicyHandler receives the current policy a PolicyMirror decoded and
// parsed: at start (when one was applied), after a resync when it changed,
// and at every apply or rollback. Calls never overlap, and each comes with
// a higher etcd revision than the one before, so versions only go forward.
type PolicyHandler interface {
	SetPolicy(pv PolicyVersion, doc *policy.Document, rev int64)
}

// PolicyMirror keeps a PolicyHandler in step with the current policy in
// etcd. A record that fails to decode, or whose document no longer parses
// under this build, is reported (MirrorConfig's OnDecodeError and the
// counter) and the handler keeps the last good policy. Deleting the
// current-policy key changes nothing either.
type PolicyMirror struct {
	d decoder
	h PolicyHandler
	// last is the revision of the record last handed over (or reported):
	// a resync hands over only a newer one. Only the mirror's goroutine
	// touches it.
	last int64
}

// NewPolicyMirror returns a mirror of store's current policy into h. Run
// runs it.
func NewPolicyMirror(store *Store, h PolicyHandler, cfg MirrorConfig) (*PolicyMirror, error) {
	if h == nil {
		return nil, errors.New("policy mirror: no handler")
	}
	d, err := newDecoder(store, KindPolicy, cfg)
	if err != nil {
		return nil, fmt.Errorf("policy mirror: %w", err)
	}
	return &PolicyMirror{d: d, h: h}, nil
}

// Run mirrors until ctx ends, and returns ctx's error.
func (m *PolicyMirror) Run(ctx context.Context) error {
	// (The key is watched as a prefix, as Mirror does; feed keeps to the
	// key itself.)
	return m.d.run(ctx, m.d.store.PolicyKey(), policyFeed{m})
}

type policyFeed struct{ m *PolicyMirror }

func (f policyFeed) Reset(kvs []*mvccpb.KeyValue, _ int64) {
	for _, kv := range kvs {
		f.Put(kv)
	}
}

func (f policyFeed) Put(kv *mvccpb.KeyValue) {
	m := f.m
	if string(kv.Key) != m.d.store.PolicyKey() || kv.ModRevision <= m.last {
		return
	}
	m.last = kv.ModRevision
	pv, doc, err := DecodePolicy(kv.Value)
	if err != nil {
		m.d.failed(kv.Key, kv.ModRevision, err)
		return
	}
	m.h.SetPolicy(pv, doc, kv.ModRevision)
}

func (f policyFeed) Delete(*mvccpb.KeyValue) {}
