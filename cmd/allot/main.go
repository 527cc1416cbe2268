// Command allot is the one binary of allot: the regional limiter, the
// coordinator, the local development cluster, the simulator and the admin CLI.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, envoyArgs(os.Args[0], os.Args[1:]), os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}
