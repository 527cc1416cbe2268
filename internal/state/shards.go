package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// MaxShards bounds the coordinator shard count.
const MaxShards = 256

// ShardsKey holds the cluster's coordinator shard count, as JSON
// {"shards": N}. The first coordinator of a new cluster writes it; it never
// changes after that (a tenant's shard is shares.ShardOf(tenant, N), and
// every pod and coordinator must agree on it). Pods wait for it before they
// report.
func (s *Store) ShardsKey() string { return s.prefix + "shards/count" }

type shardsRecord struct {
	Shards int `json:"shards"`
}

// ErrShardsFixed: a coordinator asked for a shard count the cluster does not
// have. The count is fixed when the cluster first starts.
var ErrShardsFixed = errors.New("the coordinator shard count is fixed when a cluster first starts")

// Shards reads the cluster's shard count; ErrNotFound while no coordinator
// has set it. A cluster whose coordinators ran before shard counts existed
// (shard 0's term recorded, no count) has one: InitShards can only record 1
// there. Both are read at one revision, since a new cluster's first
// coordinator records its count before it claims a term.
func (s *Store) Shards(ctx context.Context) (int, error) {
	r, err := s.c.Txn(ctx).Then(clientv3.OpGet(s.ShardsKey()), clientv3.OpGet(s.Shard(0).TermKey())).Commit()
	if err != nil {
		return 0, fmt.Errorf("read shard count: %w", err)
	}
	if kvs := r.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		return DecodeShards(kvs[0].Value)
	}
	if len(r.Responses[1].GetResponseRange().Kvs) > 0 {
		return 1, nil
	}
	return 0, fmt.Errorf("shard count: %w", ErrNotFound)
}

// DecodeShards decodes the value of ShardsKey.
func DecodeShards(value []byte) (int, error) {
	var rec shardsRecord
	if err := json.Unmarshal(value, &rec); err != nil {
		return 0, fmt.Errorf("decode shard count: %w", err)
	}
	if rec.Shards < 1 || rec.Shards > MaxShards {
		return 0, fmt.Errorf("decode shard count: shards %d: want 1 to %d", rec.Shards, MaxShards)
	}
	return rec.Shards, nil
}

// InitShards returns the cluster's shard count, writing want first when no
// coordinator has yet (want 0 means "whatever the cluster has", and 1 for a
// new cluster). A cluster whose coordinators ran before any shard count was
// written has one shard. When want is not 0 and differs from the cluster's,
// the error wraps ErrShardsFixed and names both.
func (s *Store) InitShards(ctx context.Context, want int) (int, error) {
	if want < 0 || want > MaxShards {
		return 0, fmt.Errorf("shards %d: want 1 to %d", want, MaxShards)
	}
	create := max(want, 1)
	val, _ := json.Marshal(shardsRecord{Shards: create})
	// A new cluster (no shard count, and no term recorded by shard 0)
	// takes create; one that ran before shard counts existed takes 1.
	legacy := s.Shard(0).TermKey()
	r, err := s.c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(s.ShardsKey()), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(legacy), "=", 0)).
		Then(clientv3.OpPut(s.ShardsKey(), string(val))).
		Else(clientv3.OpGet(s.ShardsKey())).Commit()
	if err != nil {
		return 0, fmt.Errorf("write shard count: %w", err)
	}
	have := create
	if !r.Succeeded {
		kvs := r.Responses[0].GetResponseRange().Kvs
		if len(kvs) > 0 {
			if have, err = DecodeShards(kvs[0].Value); err != nil {
				return 0, err
			}
		} else {
			// Coordinators ran before shard counts existed: one shard.
			one, _ := json.Marshal(shardsRecord{Shards: 1})
			r, err := s.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(s.ShardsKey()), "=", 0)).
				Then(clientv3.OpPut(s.ShardsKey(), string(one))).Else(clientv3.OpGet(s.ShardsKey())).Commit()
			if err != nil {
				return 0, fmt.Errorf("write shard count: %w", err)
			}
			have = 1
			if !r.Succeeded {
				if kvs := r.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
					if have, err = DecodeShards(kvs[0].Value); err != nil {
						return 0, err
					}
				}
			}
		}
	}
	if want != 0 && want != have {
		return have, fmt.Errorf("%w: this cluster has %d shard(s), asked for %d; start every coordinator with --shards %d (or leave it unset)", ErrShardsFixed, have, want, have)
	}
	return have, nil
}
