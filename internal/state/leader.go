package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Leader is what a coordinator leader publishes in the election.
type Leader struct {
	ID   string `json:"id"`
	GRPC string `json:"grpc,omitempty"`
	HTTP string `json:"http,omitempty"`
	// Shard is the coordinator shard it leads (see Store.Shard).
	Shard int `json:"shard,omitempty"`
}

// ElectionPrefix is the prefix the coordinators campaign under.
func (s *Store) ElectionPrefix() string { return s.shardPrefix + "election" }

// Leader returns the current coordinator leader (the candidate with the
// oldest key in the election), or ErrNotFound while there is none.
func (s *Store) Leader(ctx context.Context) (Leader, error) {
	r, err := s.c.Get(ctx, s.ElectionPrefix()+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return Leader{}, fmt.Errorf("read election: %w", err)
	}
	if len(r.Kvs) == 0 {
		return Leader{}, fmt.Errorf("coordinator leader: %w", ErrNotFound)
	}
	var l Leader
	if err := json.Unmarshal(r.Kvs[0].Value, &l); err != nil {
		return Leader{}, fmt.Errorf("decode leader: %w", err)
	}
	return l, nil
}

// TermKey holds the protocol term of the latest leader (one write per
// election).
func (s *Store) TermKey() string { return s.shardPrefix + "term" }

// ClaimTerm records term as the latest leader's, guarded by fence (the
// election key of the writer), and reports whether no leader ever recorded
// one before: then no pod can hold grants of an older term, and the new
// leader need not learn before it grants.
func (s *Store) ClaimTerm(ctx context.Context, fence clientv3.Cmp, term uint64) (first bool, err error) {
	r, err := s.c.Txn(ctx).If(fence).Then(clientv3.OpGet(s.TermKey()), clientv3.OpPut(s.TermKey(), fmt.Sprint(term))).Commit()
	if err != nil {
		return false, fmt.Errorf("record term: %w", err)
	}
	if !r.Succeeded {
		return false, ErrFenced
	}
	return len(r.Responses[0].GetResponseRange().Kvs) == 0, nil
}

// ErrFenced: a write guarded by a leader's fence was refused because the
// writer no longer holds the leadership the fence names. Nothing was
// written.
var ErrFenced = errors.New("fenced: this coordinator is no longer the leader")
