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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	run := func(name string, join ...string) (*membership.Membership, chan error) {
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
		return m, done
	}
	a, doneA := run("pod-a")
	b, doneB := run("pod-b", a.Addr())

	for deadline := time.Now().Add(5 * time.Second); a.LivePods() < 2 || b.LivePods() < 2; {
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println(a.LivePods(), b.Members())

	cancel() // both leave and shut down
	fmt.Println(<-doneA, <-doneB, a.LivePods())
	// Output:
	// 2 [pod-a pod-b]
	// <nil> <nil> 1
}
