package state

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// MirrorHandler receives a mirrored prefix: Reset with every key under it
// (at start, and again after the watch lost its place: compaction, a
// cancelled watch, a reconnect that could not resume), then Put and Delete as
// they happen, in revision order (a deleted key's ModRevision is the
// revision that deleted it). Calls never overlap. BudgetMirror and
// PolicyMirror are the typed handlers allot's records use.
type MirrorHandler interface {
	Reset(kvs []*mvccpb.KeyValue, rev int64)
	Put(kv *mvccpb.KeyValue)
	Delete(kv *mvccpb.KeyValue)
}

// Mirror keeps h in step with every key under prefix until ctx ends. It
// resyncs from a full read whenever the watch cannot continue from where it
// was, waiting retry between failed attempts (default 1s when ≤ 0). It
// returns ctx's error.
func Mirror(ctx context.Context, c *clientv3.Client, prefix string, h MirrorHandler, retry time.Duration, onErr func(error)) error {
	if retry <= 0 {
		retry = time.Second
	}
	for {
		err := mirrorOnce(ctx, c, prefix, h)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if onErr != nil {
			onErr(err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(retry):
		}
	}
}

func mirrorOnce(ctx context.Context, c *clientv3.Client, prefix string, h MirrorHandler) error {
	r, err := c.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("read %s: %w", prefix, err)
	}
	h.Reset(r.Kvs, r.Header.Revision)
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wc := c.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(r.Header.Revision+1))
	for wr := range wc {
		if err := wr.Err(); err != nil {
			return fmt.Errorf("watch %s: %w", prefix, err)
		}
		for _, ev := range wr.Events {
			switch ev.Type {
			case clientv3.EventTypePut:
				h.Put(ev.Kv)
			case clientv3.EventTypeDelete:
				h.Delete(ev.Kv)
			}
		}
	}
	return fmt.Errorf("watch %s: channel closed", prefix)
}
