// Package e2e is allot's multi-region simulation on real parts: every
// component runs in its own container (images from `make images`: the
// static allot binary, etcd, Redis, all FROM scratch), on Docker networks
// that a test can cut, and the tests drive load through the pods' public
// gRPC API from this process.
//
// # Topology
//
// A management network joins every container and is never cut: ports are
// published on it, so the load generator (on 127.0.0.1) keeps reaching a pod
// that a test has cut off. Each region has an internal network with its Redis
// and two regional pods (memberlist between them). Three more internal
// networks join the rest, so that each link can be cut alone: the backbone
// (etcd — one node in the short suite, three in the full one — and the
// coordinators, one or two), the pods' network to etcd, and the pods' network
// to the coordinators. A partition disconnects a region's pods from the last
// two; they keep their Redis and their clients.
//
// Two details keep a cut a cut. Containers get no hostname: Docker's DNS
// answers a container's hostname on every network it shares, the management
// one included, so a cut pod would still resolve etcd. And each region's
// network has a subnet chosen in 10.213.0.0/16 so that pods gossip from fixed
// addresses there (--gossip-advertise); left to choose, a pod on three
// networks advertises whichever address its default lookup finds.
//
// Timings: P = 1 s (reports and rebalances), L = 5 s, election session TTL
// 2 s, R = 200/s and B = 40 per tenant, so that the load generator offers
// 1.5R in three regions comfortably on two cores. Pods run with a 25 ms
// store timeout instead of their 5 ms default: on two loaded cores,
// scheduling alone exceeds 5 ms often enough to open breakers with Redis up.
//
// # Suites
//
// The package is a module of its own (e2e/go.mod; with deploy/images, so
// that allot's go.mod carries neither testcontainers nor the Docker client):
// run it from this directory. `go test .` (`make test` runs it) runs the
// short suite: skew, partition and Redis outage. `go test -tags e2e ./...`
// (`make e2e`) runs the full suite: every scenario, three etcd nodes and
// two coordinators, and the nemesis for each seed of E2E_NEMESIS_SEEDS
// (default 1,2,3,4,5; "none" runs none): a seeded schedule of single-link
// cuts, pod and leader kills, the leader cut from etcd, Redis paused and
// stopped, budget and floor-fraction changes, under load, with I4 checked
// against the budget in force.
// Every run writes out/report.md and a plot per scenario, with the
// simulator's prediction for the same profile beside each measurement.
//
// # Invariants checked
//
// I4 (the world admits at most B + R·W in every window W of 1, 10 and 60 s,
// counting only decisions certainly inside the window: sent at or after its
// start, answered by its end) in every scenario; I5 (utilisation after
// convergence) in skew and shift; floors under partition; fail-open and
// fail-closed under a Redis outage (I9); pinned tenants.
//
// # Clocks and concurrency
//
// The pods' decisions use their Redis's clock; the load generator and the
// measures use this process's monotonic clock (send and receive instants of
// each call). Tests run one at a time (one topology at a time on two cores);
// runs in different processes are serialised by a lock file, and every
// container and network carries the label dev.allot.e2e, swept at the start
// and end of each run.
package e2e
