// Command build makes allot's e2e images (allot, allot-etcd, allot-redis)
// offline, skipping each one whose tag for the current content exists:
//
//	cd deploy/images && go run ./build [-force]
//
// (deploy/images is a module of its own; `make images` runs this.)
//
// It prints the image references on stdout, progress on stderr.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/allot-dev/allot/deploy/images"
)

func main() {
	force := flag.Bool("force", false, "rebuild even when the tag for the current content exists")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	start := time.Now()
	set, err := images.Ensure(ctx, images.Config{Log: os.Stderr, Force: *force})
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
	fmt.Printf("%s\n%s\n%s\n", set.Allot, set.Etcd, set.Redis)
	fmt.Fprintf(os.Stderr, "images: done in %v\n", time.Since(start).Round(time.Millisecond))
}
