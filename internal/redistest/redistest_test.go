package redistest

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/allot-dev/allot/internal/wait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStartPauseResumeKill(t *testing.T) {
	s := Start(t)
	c := s.Client(t)
	ctx := context.Background()
	if got, err := c.Ping(ctx).Result(); err != nil || got != "PONG" {
		t.Fatalf("PING = %q, %v; want PONG", got, err)
	}
	if got := c.ConfigGet(ctx, "save").Val()["save"]; got != "" {
		t.Errorf("save = %q, want empty (no persistence)", got)
	}

	s.Pause(t)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	err := c.Ping(short).Err()
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err) {
		t.Fatalf("PING on a paused server = %v, want a timeout", err)
	}
	s.Resume(t)
	wait.Until(t, 5*time.Second, func() error { return c.Ping(ctx).Err() })

	s.Kill()
	if !s.Exited() {
		t.Fatal("Kill returned before the process exited")
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING after Kill succeeded")
	}
	s.Kill() // idempotent
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

func TestRestart(t *testing.T) {
	s := Start(t)
	c := s.Client(t)
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	addr := s.Addr
	s.Restart(t)
	if s.Addr != addr {
		t.Fatalf("Restart moved the server from %s to %s", addr, s.Addr)
	}
	wait.Until(t, 5*time.Second, func() error { return c.Ping(ctx).Err() })
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS k after Restart = %d, %v; want an empty server", n, err)
	}
}
