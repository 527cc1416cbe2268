package state

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// RosterPod is one pod on the roster: a pod some leader may have leased.
type RosterPod struct {
	Region string `json:"region"`
	Pod    string `json:"pod"`
}

// RosterPrefix holds one key per pod on the roster. A leader adds a pod
// before it first leases it and drops it once no lease of it can be valid;
// a new leader reads it to end its learning early (docs/protocol.md, rule
// 4).
func (s *Store) RosterPrefix() string { return s.shardPrefix + "roster/" }

func (s *Store) rosterKey(p RosterPod) string {
	return s.RosterPrefix() + url.PathEscape(p.Region) + "/" + url.PathEscape(p.Pod)
}

// Roster reads every pod on the roster.
func (s *Store) Roster(ctx context.Context) ([]RosterPod, error) {
	r, err := s.c.Get(ctx, s.RosterPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read roster: %w", err)
	}
	out := make([]RosterPod, 0, len(r.Kvs))
	for _, kv := range r.Kvs {
		var p RosterPod
		if err := json.Unmarshal(kv.Value, &p); err != nil || p.Region == "" || p.Pod == "" {
			// A record nobody can match to a pod: the reader cannot tell
			// which pod it stands for, so the caller must not trust the
			// roster at all.
			return nil, fmt.Errorf("roster record %q: cannot decode %q", kv.Key, kv.Value)
		}
		out = append(out, p)
	}
	return out, nil
}

// rosterOps is how many pods one roster transaction writes at most (etcd
// refuses transactions of more than 128 operations by default).
const rosterOps = 100

// AddToRoster puts pods on the roster, guarded by fence (the writer's
// election key): ErrFenced, and nothing written, once the writer no longer
// leads.
func (s *Store) AddToRoster(ctx context.Context, fence clientv3.Cmp, pods ...RosterPod) error {
	return s.rosterTxns(ctx, fence, "add to roster", pods, func(p RosterPod) (clientv3.Op, error) {
		v, err := json.Marshal(p)
		if err != nil {
			return clientv3.Op{}, err
		}
		return clientv3.OpPut(s.rosterKey(p), string(v)), nil
	})
}

// DropFromRoster deletes pods from the roster, guarded by fence.
func (s *Store) DropFromRoster(ctx context.Context, fence clientv3.Cmp, pods ...RosterPod) error {
	return s.rosterTxns(ctx, fence, "drop from roster", pods, func(p RosterPod) (clientv3.Op, error) {
		return clientv3.OpDelete(s.rosterKey(p)), nil
	})
}

// rosterTxns applies op to every pod, in fenced transactions of at most
// rosterOps operations. An error may leave the earlier transactions applied.
func (s *Store) rosterTxns(ctx context.Context, fence clientv3.Cmp, what string, pods []RosterPod, op func(RosterPod) (clientv3.Op, error)) error {
	for len(pods) > 0 {
		n := min(len(pods), rosterOps)
		ops := make([]clientv3.Op, 0, n)
		for _, p := range pods[:n] {
			o, err := op(p)
			if err != nil {
				return err
			}
			ops = append(ops, o)
		}
		r, err := s.c.Txn(ctx).If(fence).Then(ops...).Commit()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if !r.Succeeded {
			return ErrFenced
		}
		pods = pods[n:]
	}
	return nil
}
