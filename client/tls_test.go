package client_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/allot-dev/allot/client"
)

// testCA issues certificates for the TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "allot test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue returns a certificate for 127.0.0.1 usable by a server or a client.
func (ca *testCA) issue(t *testing.T, name string, serial int64) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// The client reaches a limiter that requires mutual TLS through Config.TLS
// or through DialOptions; without a client certificate, or in plaintext, it
// gets no decision (ErrUnavailable).
func TestTLS(t *testing.T) {
	ca := newTestCA(t)
	l := startLimiter(t, grpc.Creds(credentials.NewTLS(&tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{ca.issue(t, "limiter", 2)},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.pool,
	})))
	mtls := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: ca.pool, Certificates: []tls.Certificate{ca.issue(t, "service", 3)}}
	cases := []struct {
		name string
		edit func(*client.Config)
		ok   bool
	}{
		{"Config.TLS", func(c *client.Config) { c.TLS = mtls }, true},
		{"DialOptions", func(c *client.Config) {
			c.DialOptions = []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(mtls))}
		}, true},
		{"no client certificate", func(c *client.Config) {
			c.TLS = &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: ca.pool}
		}, false},
		{"unknown server CA", func(c *client.Config) {
			c.TLS = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: mtls.Certificates}
		}, false},
		{"plaintext", func(c *client.Config) { c.Insecure = true }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := client.DefaultConfig()
			cfg.Target, cfg.Timeout = l.Addr, generous
			tc.edit(&cfg)
			c, err := client.New(cfg)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			t.Cleanup(func() { _ = c.Close() })
			d, err := c.Decide(context.Background(), map[string]string{"tenant": "tls"}, 1)
			if tc.ok && (err != nil || !d.Allowed || d.Limit != "tenant") {
				t.Errorf("Decide = %+v, %v; want allowed by limit tenant", d, err)
			}
			if !tc.ok && !errors.Is(err, client.ErrUnavailable) {
				t.Errorf("Decide = %+v, %v; want ErrUnavailable", d, err)
			}
		})
	}
}
