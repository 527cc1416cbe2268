package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allot-dev/allot/shares"
)

// ErrFenced: a grant write was refused because the writer no longer holds
// the leadership its fence names. Nothing of that batch was written.
var ErrFenced = errors.New("fenced: this coordinator is no longer the leader")

// MaxOpsPerTxn bounds the puts in one etcd transaction (etcd's default
// --max-txn-ops is 128).
const MaxOpsPerTxn = 64

// grantRecord is a shares.Change as stored.
type grantRecord struct {
	Rate      float64 `json:"rate"`
	Burst     int64   `json:"burst"`
	Epoch     uint64  `json:"epoch"`
	CeilRate  float64 `json:"ceil_rate"`
	CeilBurst int64   `json:"ceil_burst"`
	MinEpoch  uint64  `json:"min_epoch"`
}

// GrantsPrefix is the key prefix of every grant, or of one region's grants
// when region is not empty.
func (s *Store) GrantsPrefix(region string) string {
	if region == "" {
		return s.prefix + "grants/"
	}
	return s.prefix + "grants/" + region + "/"
}

func (s *Store) grantKey(region, tenant string) string {
	return s.GrantsPrefix(region) + url.PathEscape(tenant)
}

// WriteGrants persists changes in order, in transactions of at most
// MaxOpsPerTxn puts, each guarded by fence (a comparison that holds only
// while the writer leads). It returns how many changes were written; on
// ErrFenced the rest were not. Writing a prefix of the changes is safe: the
// allocator orders shrinks before grows.
func (s *Store) WriteGrants(ctx context.Context, fence clientv3.Cmp, changes []shares.Change) (int, error) {
	written := 0
	for len(changes) > 0 {
		n := min(len(changes), MaxOpsPerTxn)
		ops := make([]clientv3.Op, 0, n)
		for _, c := range changes[:n] {
			v, err := json.Marshal(grantRecord{
				Rate: c.Grant.Rate, Burst: c.Grant.Burst, Epoch: c.Grant.Epoch,
				CeilRate: c.Ceiling.Rate, CeilBurst: c.Ceiling.Burst, MinEpoch: c.MinEpoch,
			})
			if err != nil {
				return written, err
			}
			ops = append(ops, clientv3.OpPut(s.grantKey(c.Region, c.Tenant), string(v)))
		}
		r, err := s.c.Txn(ctx).If(fence).Then(ops...).Commit()
		if err != nil {
			return written, fmt.Errorf("write %d grants: %w", n, err)
		}
		if !r.Succeeded {
			return written, ErrFenced
		}
		written += n
		changes = changes[n:]
	}
	return written, nil
}

// DecodeGrant decodes one grant key and value.
func (s *Store) DecodeGrant(key, value []byte) (shares.Change, error) {
	rest, ok := strings.CutPrefix(string(key), s.GrantsPrefix(""))
	region, esc, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 {
		return shares.Change{}, fmt.Errorf("grant key %q: not under %s<region>/<tenant>", key, s.GrantsPrefix(""))
	}
	tenant, err := url.PathUnescape(esc)
	if err != nil {
		return shares.Change{}, fmt.Errorf("grant key %q: %w", key, err)
	}
	var g grantRecord
	if err := json.Unmarshal(value, &g); err != nil {
		return shares.Change{}, fmt.Errorf("grant %q: %w", key, err)
	}
	return shares.Change{
		Tenant: tenant, Region: region,
		Grant:    shares.Grant{Rate: g.Rate, Burst: g.Burst, Epoch: g.Epoch},
		Ceiling:  shares.Ceiling{Rate: g.CeilRate, Burst: g.CeilBurst},
		MinEpoch: g.MinEpoch,
	}, nil
}

// Grants reads every grant of region (every region when empty) and the
// revision they were read at.
func (s *Store) Grants(ctx context.Context, region string) ([]shares.Change, int64, error) {
	r, err := s.c.Get(ctx, s.GrantsPrefix(region), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("read grants: %w", err)
	}
	out := make([]shares.Change, 0, len(r.Kvs))
	for _, kv := range r.Kvs {
		c, err := s.DecodeGrant(kv.Key, kv.Value)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, c)
	}
	return out, r.Header.Revision, nil
}
