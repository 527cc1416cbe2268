package state

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestInitShards(t *testing.T) {
	ctx := context.Background()
	t.Run("a new cluster takes the first count asked for, and keeps it", func(t *testing.T) {
		s := newStore(t)
		if _, err := s.Shards(ctx); !errors.Is(err, ErrNotFound) {
			t.Fatalf("before any coordinator: %v, want ErrNotFound", err)
		}
		if n, err := s.InitShards(ctx, 4); err != nil || n != 4 {
			t.Fatalf("InitShards(4) = %d, %v", n, err)
		}
		if n, err := s.InitShards(ctx, 0); err != nil || n != 4 {
			t.Fatalf("InitShards(0) after 4 = %d, %v; want 4", n, err)
		}
		n, err := s.InitShards(ctx, 2)
		if !errors.Is(err, ErrShardsFixed) || n != 4 || !strings.Contains(err.Error(), "--shards 4") {
			t.Fatalf("InitShards(2) after 4 = %d, %v; want 4 and ErrShardsFixed naming --shards 4", n, err)
		}
		if n, err := s.Shards(ctx); err != nil || n != 4 {
			t.Fatalf("Shards = %d, %v", n, err)
		}
	})
	t.Run("unset on a new cluster means one", func(t *testing.T) {
		s := newStore(t)
		if n, err := s.InitShards(ctx, 0); err != nil || n != 1 {
			t.Fatalf("InitShards(0) = %d, %v; want 1", n, err)
		}
	})
	t.Run("a cluster that ran before shard counts has one", func(t *testing.T) {
		s := newStore(t)
		if _, err := s.c.Put(ctx, s.TermKey(), "12345"); err != nil {
			t.Fatal(err)
		}
		// A pod upgraded before the coordinators reads one shard.
		if n, err := s.Shards(ctx); err != nil || n != 1 {
			t.Fatalf("Shards on a cluster that ran before shard counts = %d, %v; want 1", n, err)
		}
		if n, err := s.InitShards(ctx, 3); !errors.Is(err, ErrShardsFixed) || n != 1 {
			t.Fatalf("InitShards(3) on a running one-shard cluster = %d, %v; want 1 and ErrShardsFixed", n, err)
		}
		if n, err := s.Shards(ctx); err != nil || n != 1 {
			t.Fatalf("Shards = %d, %v; want 1 recorded", n, err)
		}
	})
	t.Run("bad counts are refused, nothing written", func(t *testing.T) {
		s := newStore(t)
		for _, n := range []int{-1, MaxShards + 1} {
			if _, err := s.InitShards(ctx, n); err == nil || !strings.Contains(err.Error(), "shards") {
				t.Errorf("InitShards(%d): %v, want an error naming shards", n, err)
			}
		}
		if _, err := s.Shards(ctx); !errors.Is(err, ErrNotFound) {
			t.Fatalf("after refusals: %v, want nothing written", err)
		}
		for _, v := range []string{`{"shards":0}`, `{"shards":-2}`, `nope`} {
			if _, err := DecodeShards([]byte(v)); err == nil {
				t.Errorf("DecodeShards(%s) accepted", v)
			}
		}
	})
	t.Run("racing coordinators agree", func(t *testing.T) {
		s := newStore(t)
		got := make(chan string, 8)
		for i := range 8 {
			go func() {
				n, err := s.InitShards(ctx, 2+i%2)
				got <- fmt.Sprint(n, errors.Is(err, ErrShardsFixed))
			}()
		}
		counts := map[string]int{}
		for range 8 {
			counts[<-got]++
		}
		n, _ := s.Shards(ctx)
		// Every caller saw the one count written; those that asked for
		// the other were refused.
		if counts[fmt.Sprint(n, false)] != 4 || counts[fmt.Sprint(n, true)] != 4 {
			t.Fatalf("racing InitShards: %v with %d written", counts, n)
		}
	})
}

// Shards keep their election, term and roster apart; shard 0 keeps the keys
// a one-shard cluster always used.
func TestShardKeys(t *testing.T) {
	s := newStore(t)
	if s.Shard(0).ElectionPrefix() != s.ElectionPrefix() || s.Shard(0).TermKey() != s.TermKey() || s.Shard(0).RosterPrefix() != s.RosterPrefix() {
		t.Fatal("shard 0 moved the one-shard keys")
	}
	a, b := s.Shard(1), s.Shard(2)
	for _, k := range []string{a.ElectionPrefix(), a.TermKey(), a.RosterPrefix(), b.ElectionPrefix(), b.TermKey(), b.RosterPrefix()} {
		for _, other := range []string{s.ElectionPrefix(), s.TermKey(), s.RosterPrefix(), s.ShardsKey(), s.PolicyKey(), s.BudgetsPrefix()} {
			if strings.HasPrefix(k, other) || strings.HasPrefix(other, k) {
				t.Errorf("shard key %q overlaps %q", k, other)
			}
		}
	}
	if strings.HasPrefix(a.RosterPrefix(), b.RosterPrefix()) || a.BudgetsPrefix() != s.BudgetsPrefix() || a.PolicyKey() != s.PolicyKey() {
		t.Fatal("shards must share policy and budgets and nothing else")
	}
	ctx := context.Background()
	put, err := s.c.Put(ctx, a.ElectionPrefix()+"/x", `{"id":"c1","grpc":"a:1"}`)
	if err != nil {
		t.Fatal(err)
	}
	if l, err := a.Leader(ctx); err != nil || l.ID != "c1" {
		t.Fatalf("shard 1 leader: %v, %v", l, err)
	}
	if _, err := b.Leader(ctx); !errors.Is(err, ErrNotFound) {
		t.Fatalf("shard 2 sees shard 1's leader: %v", err)
	}
	if _, err := s.Leader(ctx); !errors.Is(err, ErrNotFound) {
		t.Fatalf("shard 0 sees shard 1's leader: %v", err)
	}
	fence := clientv3.Compare(clientv3.CreateRevision(a.ElectionPrefix()+"/x"), "=", put.Header.Revision)
	if err := a.AddToRoster(ctx, fence, RosterPod{Region: "eu", Pod: "p1"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Roster(ctx); len(got) != 0 {
		t.Fatalf("shard 0's roster holds shard 1's pod: %v", got)
	}
}
