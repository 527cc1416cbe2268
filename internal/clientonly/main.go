// Command clientonly is a module of its own that imports only allot's client
// package, as an application using the client would. `make check-client-deps`
// (part of `make verify`) lists its module graph and fails when a module of
// testcontainers, moby, Docker or containerd appears in it: those are what
// allot's e2e suite and image builder (modules e2e and deploy/images) need,
// and an application that only asks allot for decisions must not download
// them.
package main

import (
	"fmt"
	"os"

	"github.com/allot-dev/allot/client"
)

func main() {
	cfg := client.DefaultConfig()
	cfg.Target, cfg.Insecure = "127.0.0.1:8081", true
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "clientonly:", err)
		os.Exit(1)
	}
	fmt.Println("clientonly: client config valid for", cfg.Target)
}
