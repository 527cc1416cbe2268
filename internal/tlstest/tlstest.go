package tlstest

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

// PKI is a throwaway CA with a server and a client certificate, and a
// second, unrelated CA with its own client certificate.
type PKI struct {
	// Dir holds the files.
	Dir string
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

// New writes a PKI into tb.TempDir().
func New(tb testing.TB) *PKI {
	tb.Helper()
	p := &PKI{Dir: tb.TempDir()}
	p.ca, p.caKey, p.CA = p.newCA(tb, "allot test CA", "ca.pem")
	p.ServerCert, p.ServerKey = p.issue(tb, p.ca, p.caKey, "localhost", "server", []string{"localhost", "127.0.0.1"})
	p.ClientCert, p.ClientKey = p.issue(tb, p.ca, p.caKey, "allot-client", "client", nil)
	other, otherKey, otherFile := p.newCA(tb, "other CA", "other-ca.pem")
	p.OtherCA = otherFile
	p.OtherClientCert, p.OtherClientKey = p.issue(tb, other, otherKey, "intruder", "other-client", nil)
	return p
}

// IssueServer signs, with the CA, a certificate for server and client auth
// whose SANs are hosts (IP addresses where they parse as one, else DNS
// names), and writes it as <name>.pem and <name>-key.pem.
func (p *PKI) IssueServer(tb testing.TB, name string, hosts ...string) (certFile, keyFile string) {
	tb.Helper()
	cn := name
	if len(hosts) > 0 {
		cn = hosts[0]
	}
	return p.issue(tb, p.ca, p.caKey, cn, name, hosts)
}

// ReissueServer writes a new server certificate and key over the old
// files, dated later so a reload notices on any filesystem, and returns the
// new certificate's serial number.
func (p *PKI) ReissueServer(tb testing.TB, at time.Time) int64 {
	tb.Helper()
	p.issue(tb, p.ca, p.caKey, "localhost", "server", []string{"localhost", "127.0.0.1"})
	for _, f := range []string{p.ServerCert, p.ServerKey} {
		if err := os.Chtimes(f, at, at); err != nil {
			tb.Fatal(err)
		}
	}
	return p.serial
}

func (p *PKI) path(name string) string { return filepath.Join(p.Dir, name) }

func (p *PKI) newCA(tb testing.TB, cn, file string) (*x509.Certificate, *ecdsa.PrivateKey, string) {
	tb.Helper()
	key := newKey(tb)
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
		tb.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	writePEM(tb, p.path(file), "CERTIFICATE", der)
	return c, key, p.path(file)
}

// issue signs a leaf for cn and writes <name>.pem and <name>-key.pem. With
// hosts it is a server certificate too, for those names.
func (p *PKI) issue(tb testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn, name string, hosts []string) (certFile, keyFile string) {
	tb.Helper()
	key := newKey(tb)
	p.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if len(hosts) > 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	certFile, keyFile = p.path(name+".pem"), p.path(name+"-key.pem")
	writePEM(tb, certFile, "CERTIFICATE", der)
	writePEM(tb, keyFile, "PRIVATE KEY", kder)
	return certFile, keyFile
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	tb.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

func writePEM(tb testing.TB, file, typ string, der []byte) {
	tb.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
}
