package tlsconfig

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// pki is a throwaway CA with a server and a client certificate, and a
// second, unrelated CA with its own client certificate, all written as PEM
// files into one temporary directory.
type pki struct {
	dir string
	// CA is the trusted CA's certificate file.
	CA string
	// ServerCert/ServerKey: CN localhost, SANs 127.0.0.1 and localhost,
	// usable for server and client auth (etcd dials itself with it).
	ServerCert, ServerKey string
	// ClientCert/ClientKey: CN allot-client, client auth.
	ClientCert, ClientKey string
	// OtherCA and its client certificate.
	OtherCA                         string
	OtherClientCert, OtherClientKey string

	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	serial int64
}

func newPKI(t testing.TB) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir()}
	p.ca, p.caKey, p.CA = p.newCA(t, "allot test CA", "ca.pem")
	p.ServerCert, p.ServerKey = p.issue(t, p.ca, p.caKey, "localhost", "server", true)
	p.ClientCert, p.ClientKey = p.issue(t, p.ca, p.caKey, "allot-client", "client", false)
	other, otherKey, otherFile := p.newCA(t, "other CA", "other-ca.pem")
	p.OtherCA = otherFile
	p.OtherClientCert, p.OtherClientKey = p.issue(t, other, otherKey, "intruder", "other-client", false)
	return p
}

func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

func (p *pki) newCA(t testing.TB, cn, file string) (*x509.Certificate, *ecdsa.PrivateKey, string) {
	t.Helper()
	key := newKey(t)
	p.serial++
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(p.serial),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, p.path(file), "CERTIFICATE", der)
	return c, key, p.path(file)
}

// issue signs a leaf for cn and writes <name>.pem and <name>-key.pem.
func (p *pki) issue(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn, name string, server bool) (certFile, keyFile string) {
	t.Helper()
	key := newKey(t)
	p.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = p.path(name+".pem"), p.path(name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", kder)
	return certFile, keyFile
}

// reissueServer writes a new server certificate and key over the old
// files, dated later so a reload notices on any filesystem, and returns the
// new certificate's serial number.
func (p *pki) reissueServer(t testing.TB, at time.Time) int64 {
	t.Helper()
	p.issue(t, p.ca, p.caKey, "localhost", "server", true)
	for _, f := range []string{p.ServerCert, p.ServerKey} {
		if err := os.Chtimes(f, at, at); err != nil {
			t.Fatal(err)
		}
	}
	return p.serial
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writePEM(t testing.TB, file, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
