// Package redistest starts real redis-server processes for tests and
// benchmarks: a single node (Start) or a three-master Redis Cluster
// (StartCluster), each on free loopback ports with its data in a temporary
// directory, stopped when the test ends.
//
// It never skips: a missing redis-server or redis-cli fails the test with a
// message saying how to install it. Servers can be killed, paused (SIGSTOP)
// and resumed for fault tests. Eventually polls a condition against a
// deadline, for tests that wait on a real system without sleeping.
//
// Every fixture belongs to the test that started it (t.Cleanup), never to a
// package global. Methods of Server are safe for concurrent use. The clock
// that matters is the server's own (TIME); this package reads the local
// clock only to bound waits.
package redistest
