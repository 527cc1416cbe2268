// Package tlsconfig builds *tls.Config values from PEM files for allot's
// servers (gRPC and HTTP, optionally requiring client certificates) and its
// clients (Redis, etcd, the coordinator), and adapts them to gRPC, go-redis
// and the etcd client.
//
// # Invariants
//
//   - TLS 1.2 is the minimum; Go's default cipher suites and curves apply.
//   - A server given a client CA requires and verifies a client certificate
//     signed by it (mutual TLS); without one it asks for none.
//   - A client verifies the server against its CA file, or the system
//     roots without one. Verification is skipped only when
//     InsecureSkipVerify is set, never implicitly, and never together with
//     a CA file (which would mean the caller wanted verification).
//   - Errors name the setting as a flag and as a field
//     ("--redis-tls-cert (CertFile): ..."), using FlagPrefix, or, for a
//     Client given Names, by the name given for the field (an
//     environment variable, say).
//   - Certificates and keys are re-read when their files change: the
//     files' modification time and size are checked at most once per
//     ReloadInterval, during a handshake. A pair that fails to load (a
//     half-written rotation) is logged and the previous one kept. CA files
//     are read once, when the config is built; rotate a CA by adding the
//     new one to the bundle and restarting.
//
// # Concurrency
//
// The *tls.Config values returned are safe for concurrent handshakes, as
// crypto/tls requires. Reloading runs inside a handshake, in at most one at
// a time; the others go on with the current certificate. No goroutines are
// started.
//
// # Clocks
//
// The local clock paces reload checks only; certificate validity is checked
// by crypto/tls against the local clock, as always.
package tlsconfig
