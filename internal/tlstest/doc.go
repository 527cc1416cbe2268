// Package tlstest writes a throwaway PKI for tests: a CA with a server and
// a client certificate, and a second, unrelated CA with its own client
// certificate, all as PEM files in the test's temporary directory.
//
// Certificates are ECDSA P-256, valid from an hour ago for a day. Every
// fixture belongs to the test that made it (files under tb.TempDir()); a
// PKI is not safe for concurrent use. The local clock dates the
// certificates, as crypto/tls checks them against it.
package tlstest
