package etcdtest

import (
	"context"
	"testing"
)

func TestStart(t *testing.T) {
	s := Start(t)
	c := s.Client(t)
	ctx := context.Background()
	if _, err := c.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	r, err := c.Get(ctx, "k")
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "v" {
		t.Fatalf("Get(k) = %v, %v; want v", r, err)
	}
}
