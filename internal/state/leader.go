package state

import (
	"context"
	"encoding/json"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Leader is what a coordinator leader publishes in the election.
type Leader struct {
	ID   string `json:"id"`
	GRPC string `json:"grpc,omitempty"`
	HTTP string `json:"http,omitempty"`
}

// ElectionPrefix is the prefix the coordinators campaign under.
func (s *Store) ElectionPrefix() string { return s.prefix + "election" }

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
