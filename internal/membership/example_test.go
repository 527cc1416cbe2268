package membership_test

import (
	"context"
	"fmt"
	"time"

	"github.com/allot-dev/allot/internal/membership"
)

// Two pods of one region on loopback: the second joins the first, and both
// count two live pods.
func Example() {
	run := func(name string, join ...string) (*membership.Membership, context.CancelFunc, chan error) {
		ctx, cancel := context.WithCancel(context.Background())
		cfg := membership.DefaultConfig()
		cfg.Region, cfg.NodeName = "us-east", name
		cfg.BindAddr = "127.0.0.1:0" // any free port
		cfg.Join = join
		m, err := membership.New(cfg)
		if err != nil {
			panic(err)
		}
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		<-m.Ready()
		return m, cancel, done
	}
	a, stopA, doneA := run("pod-a")
	b, stopB, doneB := run("pod-b", a.Addr())

	// Wait (at most 5 s) until each has seen the other.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.After(5 * time.Second); a.LivePods() < 2 || b.LivePods() < 2; {
		select {
		case <-tick.C:
			continue
		case <-deadline:
		}
		break
	}
	fmt.Println(a.LivePods(), b.Members())

	stopB() // b leaves gracefully; a counts one pod at once
	fmt.Println(<-doneB, a.LivePods())
	stopA()
	fmt.Println(<-doneA, a.LivePods())
	// Output:
	// 2 [pod-a pod-b]
	// <nil> 1
	// <nil> 1
}
