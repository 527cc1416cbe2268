package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allot-dev/allot/policy"
)

// DefaultPrefix is where allot keeps its state in etcd.
const DefaultPrefix = "/allot/v1/"

// Sentinel errors.
var (
	// ErrConflict: another writer changed the record since it was read.
	ErrConflict = errors.New("conflict: changed by another writer since it was read; read it again and retry")
	// ErrNoPolicy: an operation needs a policy and none was applied.
	ErrNoPolicy = errors.New("no policy applied yet: apply one first with 'allot policy apply -f FILE'")
	// ErrNotFound: no such record.
	ErrNotFound = errors.New("not found")
)

// Store reads and writes allot's state in etcd.
type Store struct {
	c      *clientv3.Client
	prefix string
	// shardPrefix is where this Store's coordinator shard keeps its
	// election, term and roster: prefix itself for shard 0 (so that a
	// one-shard cluster keeps the keys it always had), prefix +
	// "shards/I/" for shard I > 0.
	shardPrefix string
	shard       int
}

// New returns a Store over c under prefix ("" means DefaultPrefix).
func New(c *clientv3.Client, prefix string) *Store {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return &Store{c: c, prefix: prefix, shardPrefix: prefix}
}

// Shard returns a Store whose election, term and roster are coordinator
// shard i's (see ShardsKey); policy and budgets are shared by every shard.
// Shard 0 uses the keys a one-shard cluster uses.
func (s *Store) Shard(i int) *Store {
	c := *s
	c.shard = i
	c.shardPrefix = s.prefix
	if i > 0 {
		c.shardPrefix = fmt.Sprintf("%sshards/%d/", s.prefix, i)
	}
	return &c
}

// ShardIndex returns the coordinator shard whose keys this Store uses.
func (s *Store) ShardIndex() int { return s.shard }

// Client returns the etcd client.
func (s *Store) Client() *clientv3.Client { return s.c }

// Prefix returns the key prefix.
func (s *Store) Prefix() string { return s.prefix }

// PolicyVersion is one applied version of the policy.
type PolicyVersion struct {
	// Version counts applies from 1.
	Version int64 `json:"version"`
	// Document is the text exactly as applied (YAML or JSON).
	Document string `json:"document"`
	// AppliedAt is when it was applied (the writer's clock).
	AppliedAt time.Time `json:"applied_at"`
	// Note says who or why, e.g. "rollback to 3".
	Note string `json:"note,omitempty"`
	// RestoredFrom is the version a rollback copied, or 0.
	RestoredFrom int64 `json:"restored_from,omitempty"`
}

func (s *Store) policyCurrent() string { return s.prefix + "policy/current" }
func (s *Store) policyHistory(v int64) string {
	return fmt.Sprintf("%spolicy/history/%020d", s.prefix, v)
}

// Policy returns the current policy version and its parsed document, or
// ErrNotFound when no policy was ever applied.
func (s *Store) Policy(ctx context.Context) (PolicyVersion, *policy.Document, error) {
	pv, _, err := s.currentPolicy(ctx)
	if err != nil {
		return PolicyVersion{}, nil, err
	}
	doc, err := policy.Parse([]byte(pv.Document))
	if err != nil {
		return pv, nil, fmt.Errorf("stored policy version %d no longer parses: %w", pv.Version, err)
	}
	return pv, doc, nil
}

// currentPolicy returns the current record and its mod revision (0 if none).
func (s *Store) currentPolicy(ctx context.Context) (PolicyVersion, int64, error) {
	r, err := s.c.Get(ctx, s.policyCurrent())
	if err != nil {
		return PolicyVersion{}, 0, fmt.Errorf("read policy: %w", err)
	}
	if len(r.Kvs) == 0 {
		return PolicyVersion{}, 0, fmt.Errorf("policy: %w", ErrNotFound)
	}
	var pv PolicyVersion
	if err := json.Unmarshal(r.Kvs[0].Value, &pv); err != nil {
		return PolicyVersion{}, 0, fmt.Errorf("decode policy record: %w", err)
	}
	return pv, r.Kvs[0].ModRevision, nil
}

// ApplyPolicy validates data and stores it as the next version. With
// ifVersion > 0 it applies only if the current version is ifVersion;
// otherwise it applies over whatever version it reads, and still returns
// ErrConflict when another apply lands between that read and its write.
// A document that fails validation changes nothing.
func (s *Store) ApplyPolicy(ctx context.Context, data []byte, ifVersion int64, note string) (PolicyVersion, error) {
	if _, err := policy.Parse(data); err != nil {
		return PolicyVersion{}, err
	}
	return s.writePolicy(ctx, string(data), ifVersion, note, 0)
}

func (s *Store) writePolicy(ctx context.Context, doc string, ifVersion int64, note string, restored int64) (PolicyVersion, error) {
	cur, rev, err := s.currentPolicy(ctx)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return PolicyVersion{}, err
	}
	if ifVersion > 0 && cur.Version != ifVersion {
		return PolicyVersion{}, fmt.Errorf("policy is at version %d, not %d: %w", cur.Version, ifVersion, ErrConflict)
	}
	next := PolicyVersion{Version: cur.Version + 1, Document: doc, AppliedAt: time.Now().UTC(), Note: note, RestoredFrom: restored}
	b, err := json.Marshal(next)
	if err != nil {
		return PolicyVersion{}, err
	}
	r, err := s.c.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(s.policyCurrent()), "=", rev)).
		Then(clientv3.OpPut(s.policyCurrent(), string(b)), clientv3.OpPut(s.policyHistory(next.Version), string(b))).
		Commit()
	if err != nil {
		return PolicyVersion{}, fmt.Errorf("write policy: %w", err)
	}
	if !r.Succeeded {
		return PolicyVersion{}, fmt.Errorf("policy version %d: %w", next.Version, ErrConflict)
	}
	return next, nil
}

// PolicyHistory returns up to limit versions, newest first (limit ≤ 0: all).
func (s *Store) PolicyHistory(ctx context.Context, limit int) ([]PolicyVersion, error) {
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend)}
	if limit > 0 {
		opts = append(opts, clientv3.WithLimit(int64(limit)))
	}
	r, err := s.c.Get(ctx, s.prefix+"policy/history/", opts...)
	if err != nil {
		return nil, fmt.Errorf("read policy history: %w", err)
	}
	out := make([]PolicyVersion, 0, len(r.Kvs))
	for _, kv := range r.Kvs {
		var pv PolicyVersion
		if err := json.Unmarshal(kv.Value, &pv); err != nil {
			return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		out = append(out, pv)
	}
	return out, nil
}

// PolicyAt returns one version from the history.
func (s *Store) PolicyAt(ctx context.Context, version int64) (PolicyVersion, error) {
	r, err := s.c.Get(ctx, s.policyHistory(version))
	if err != nil {
		return PolicyVersion{}, fmt.Errorf("read policy version %d: %w", version, err)
	}
	if len(r.Kvs) == 0 {
		return PolicyVersion{}, fmt.Errorf("policy version %d: %w", version, ErrNotFound)
	}
	var pv PolicyVersion
	if err := json.Unmarshal(r.Kvs[0].Value, &pv); err != nil {
		return PolicyVersion{}, fmt.Errorf("decode policy version %d: %w", version, err)
	}
	return pv, nil
}

// RollbackPolicy makes the document of version to (0: the version before the
// current one) current again, as a new version that records where it came
// from. The restored text is byte-identical to the one applied then.
func (s *Store) RollbackPolicy(ctx context.Context, to, ifVersion int64) (PolicyVersion, error) {
	cur, _, err := s.currentPolicy(ctx)
	if err != nil {
		return PolicyVersion{}, err
	}
	if to == 0 {
		to = cur.Version - 1
	}
	if to < 1 {
		return PolicyVersion{}, fmt.Errorf("no version before %d to roll back to: %w", cur.Version, ErrNotFound)
	}
	old, err := s.PolicyAt(ctx, to)
	if err != nil {
		return PolicyVersion{}, err
	}
	if _, err := policy.Parse([]byte(old.Document)); err != nil {
		return PolicyVersion{}, fmt.Errorf("version %d does not validate under this build: %w", to, err)
	}
	if ifVersion == 0 {
		ifVersion = cur.Version
	}
	return s.writePolicy(ctx, old.Document, ifVersion, fmt.Sprintf("rollback to %d", to), to)
}

// PolicyKey is the key of the current policy record, to watch.
func (s *Store) PolicyKey() string { return s.policyCurrent() }

// DecodePolicy decodes a current-policy record and parses its document.
func DecodePolicy(value []byte) (PolicyVersion, *policy.Document, error) {
	var pv PolicyVersion
	if err := json.Unmarshal(value, &pv); err != nil {
		return PolicyVersion{}, nil, fmt.Errorf("decode policy record: %w", err)
	}
	doc, err := policy.Parse([]byte(pv.Document))
	if err != nil {
		return pv, nil, fmt.Errorf("stored policy version %d no longer parses: %w", pv.Version, err)
	}
	return pv, doc, nil
}
