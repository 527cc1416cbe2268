package state

import (
	"context"
	"errors"
	"slices"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The roster takes writes only under the writer's fence, and reads back
// what was written, odd names included.
func TestRoster(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	// A fence as a leader's: its election key's create revision.
	put, err := s.c.Put(ctx, s.prefix+"election/x", "me")
	if err != nil {
		t.Fatal(err)
	}
	fence := clientv3.Compare(clientv3.CreateRevision(s.prefix+"election/x"), "=", put.Header.Revision)
	stale := clientv3.Compare(clientv3.CreateRevision(s.prefix+"election/x"), "=", put.Header.Revision-1)

	if got, err := s.Roster(ctx); err != nil || len(got) != 0 {
		t.Fatalf("empty roster: %v, %v", got, err)
	}
	var pods []RosterPod
	for i := range 250 { // more than one transaction
		pods = append(pods, RosterPod{Region: "eu-west", Pod: "pod/" + string(rune('a'+i%26)) + "-" + string(rune('0'+i/26))})
	}
	pods = append(pods, RosterPod{Region: "us-east", Pod: "a b%c"})
	if err := s.AddToRoster(ctx, fence, pods...); err != nil {
		t.Fatal(err)
	}
	if err := s.AddToRoster(ctx, stale, RosterPod{Region: "us-east", Pod: "late"}); !errors.Is(err, ErrFenced) {
		t.Fatalf("a write under a stale fence: %v, want ErrFenced", err)
	}
	got, err := s.Roster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	key := func(p RosterPod) string { return p.Region + "|" + p.Pod }
	want := make([]string, 0, len(pods))
	for _, p := range pods {
		want = append(want, key(p))
	}
	have := make([]string, 0, len(got))
	for _, p := range got {
		have = append(have, key(p))
	}
	slices.Sort(want)
	slices.Sort(have)
	if !slices.Equal(have, want) {
		t.Fatalf("roster holds %d pods, want the %d written (first: %v)", len(have), len(want), have[:min(3, len(have))])
	}
	if err := s.DropFromRoster(ctx, stale, pods[0]); !errors.Is(err, ErrFenced) {
		t.Fatalf("a drop under a stale fence: %v, want ErrFenced", err)
	}
	if err := s.DropFromRoster(ctx, fence, pods[:200]...); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Roster(ctx); err != nil || len(got) != len(pods)-200 {
		t.Fatalf("after dropping 200: %d pods, %v; want %d", len(got), err, len(pods)-200)
	}
	// A record that does not decode makes the whole roster untrusted.
	if _, err := s.c.Put(ctx, s.RosterPrefix()+"junk", "{"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Roster(ctx); err == nil {
		t.Fatal("a roster with an undecodable record read without error")
	}
}
