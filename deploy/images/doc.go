// Package images builds allot's container images offline, for the e2e suite
// and the compose file: the Docker engine here reaches no registry, so every
// image starts FROM scratch and is assembled from files on this machine.
// It is a module of its own (deploy/images/go.mod), so that allot's go.mod
// never carries the Docker client; `make images` runs `go run ./build` here.
//
//   - allot:<hash>: the static allot binary (CGO_ENABLED=0, -trimpath) with
//     deploy/Dockerfile.
//   - allot-etcd:<hash>: etcd compiled from go.etcd.io/etcd/server/v3 at the
//     version in allot's go.mod, in a throwaway module, so allot's go.mod
//     never carries etcd's command-line dependencies.
//   - allot-redis:<hash>: the host's real redis-server (not Debian's symlink:
//     Redis picks its mode from its file name), every library ldd lists at its
//     exact path, and the loader.
//
// # Invariants
//
// The tag is a hash of everything that goes into the image (sources, go.mod,
// go.sum, Go version, Dockerfile; the etcd version; the Redis files), so
// Ensure builds only what changed and a tag that exists is current. Each
// build also moves the image's :dev tag and removes older hashes of it.
// Builds use the classic builder and no RUN, so they need no network and no
// BuildKit.
//
// # Concurrency and clocks
//
// Ensure runs one build at a time and starts no goroutines; it reads no
// clock except for the progress lines' timings.
package images
