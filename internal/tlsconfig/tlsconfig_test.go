package tlsconfig

import (
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/allot-dev/allot/internal/tlstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/client/pkg/v3/logutil.(*MergeLogger).outputLoop"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
	)
}

func TestServerValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		s    Server
		want string // substring of the error; "" for none
	}{
		{"off", Server{}, ""},
		{"tls", Server{CertFile: "c", KeyFile: "k"}, ""},
		{"mtls", Server{CertFile: "c", KeyFile: "k", ClientCAFile: "ca"}, ""},
		{"key without cert", Server{KeyFile: "k"}, "--tls-cert (CertFile): required when --tls-key is set"},
		{"ca without cert", Server{ClientCAFile: "ca"}, "--tls-cert (CertFile): required when --tls-client-ca is set"},
		{"cert without key", Server{CertFile: "c"}, "--tls-key (KeyFile): required with --tls-cert"},
		{"prefix", Server{FlagPrefix: "grpc-tls", CertFile: "c"}, "--grpc-tls-key (KeyFile)"},
		{"negative reload", Server{ReloadInterval: -1}, "ReloadInterval"},
		{"cert without key, by name", Server{CertFile: "c", Names: serverNames}, "tls config: GRPC_KEY: required with GRPC_CERT"},
		{"ca without cert, by name", Server{ClientCAFile: "ca", Names: serverNames}, "tls config: GRPC_CERT: required when GRPC_CA is set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErr(t, "Validate()", tt.s.Validate(), tt.want)
		})
	}
}

func TestClientValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		c       Client
		want    string
		enabled bool
	}{
		{"off", Client{}, "", false},
		{"system roots", Client{Enable: true}, "", true},
		{"server name alone", Client{ServerName: "redis.internal"}, "", true},
		{"ca", Client{CAFile: "ca"}, "", true},
		{"mtls", Client{CAFile: "ca", CertFile: "c", KeyFile: "k"}, "", true},
		{"skip verify", Client{InsecureSkipVerify: true}, "", true},
		{"cert without key", Client{FlagPrefix: "redis-tls", CertFile: "c"}, "--redis-tls-key (KeyFile): required with --redis-tls-cert", true},
		{"key without cert", Client{FlagPrefix: "etcd-tls", KeyFile: "k"}, "--etcd-tls-cert (CertFile): required with --etcd-tls-key", true},
		{"skip verify with ca", Client{CAFile: "ca", InsecureSkipVerify: true}, "--tls-insecure-skip-verify (InsecureSkipVerify): contradicts --tls-ca", true},
		{"cert without key, by name", Client{CertFile: "c", Names: envNames}, "tls config: XDS_KEY: required with XDS_CERT", true},
		{"key without cert, by name", Client{KeyFile: "k", Names: envNames}, "tls config: XDS_CERT: required with XDS_KEY", true},
		{"skip verify with ca, by name", Client{CAFile: "ca", InsecureSkipVerify: true, Names: envNames}, "--tls-insecure-skip-verify (InsecureSkipVerify): contradicts XDS_CA", true},
		{"negative reload", Client{ReloadInterval: -time.Second}, "ReloadInterval", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErr(t, "Validate()", tt.c.Validate(), tt.want)
			if got := tt.c.Enabled(); got != tt.enabled {
				t.Errorf("Enabled() = %v, want %v", got, tt.enabled)
			}
		})
	}
}

// serverNames names a Server's settings as environment variables.
var serverNames = map[string]string{"CertFile": "GRPC_CERT", "KeyFile": "GRPC_KEY", "ClientCAFile": "GRPC_CA"}

// envNames names a Client's settings as environment variables.
var envNames = map[string]string{"CAFile": "XDS_CA", "CertFile": "XDS_CERT", "KeyFile": "XDS_KEY"}

func checkErr(t *testing.T, call string, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("%s = %v, want nil", call, err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Errorf("%s = %v, want an error containing %q", call, err, want)
	}
}

// Config reads the files and names the flag (or the name given) of the
// one at fault.
func TestConfigFileErrors(t *testing.T) {
	t.Parallel()
	p := tlstest.New(t)
	missing := filepath.Join(t.TempDir(), "missing.pem")
	notPEM := filepath.Join(t.TempDir(), "garbage.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	servers := []struct {
		name string
		s    Server
		want string
	}{
		{"missing cert", Server{FlagPrefix: "grpc-tls", CertFile: missing, KeyFile: p.ServerKey}, "--grpc-tls-cert (CertFile)"},
		{"missing key", Server{CertFile: p.ServerCert, KeyFile: missing}, "--tls-key (KeyFile)"},
		{"mismatched pair", Server{CertFile: p.ServerCert, KeyFile: p.ClientKey}, "--tls-cert (CertFile), --tls-key (KeyFile)"},
		{"garbage cert", Server{CertFile: notPEM, KeyFile: p.ServerKey}, "--tls-cert (CertFile), --tls-key (KeyFile)"},
		{"missing client ca", Server{CertFile: p.ServerCert, KeyFile: p.ServerKey, ClientCAFile: missing}, "--tls-client-ca (ClientCAFile)"},
		{"missing cert, by name", Server{CertFile: missing, KeyFile: p.ServerKey, Names: serverNames}, "GRPC_CERT"},
		{"missing client ca, by name", Server{CertFile: p.ServerCert, KeyFile: p.ServerKey, ClientCAFile: missing, Names: serverNames}, "GRPC_CA"},
		{"garbage client ca", Server{CertFile: p.ServerCert, KeyFile: p.ServerKey, ClientCAFile: notPEM}, "--tls-client-ca (ClientCAFile)"},
	}
	for _, tt := range servers {
		t.Run("server/"+tt.name, func(t *testing.T) {
			cfg, err := tt.s.Config()
			checkErr(t, "Config()", err, tt.want)
			if cfg != nil {
				t.Errorf("Config() = %v with an error", cfg)
			}
		})
	}
	clients := []struct {
		name string
		c    Client
		want string
	}{
		{"missing ca", Client{FlagPrefix: "redis-tls", CAFile: missing}, "--redis-tls-ca (CAFile)"},
		{"garbage ca", Client{CAFile: notPEM}, "--tls-ca (CAFile)"},
		{"missing cert", Client{CertFile: missing, KeyFile: p.ClientKey}, "--tls-cert (CertFile)"},
		{"mismatched pair", Client{CertFile: p.ClientCert, KeyFile: p.ServerKey}, "--tls-cert (CertFile), --tls-key (KeyFile)"},
		{"missing ca, by name", Client{CAFile: missing, Names: envNames}, "tls config: XDS_CA: open " + missing},
		{"garbage ca, by name", Client{CAFile: notPEM, Names: envNames}, "tls config: XDS_CA: " + notPEM + ": no PEM certificates"},
		{"missing cert, by name", Client{CertFile: missing, KeyFile: p.ClientKey, Names: envNames}, "tls config: XDS_CERT: stat " + missing},
		{"missing key, by name", Client{CertFile: p.ClientCert, KeyFile: missing, Names: envNames}, "tls config: XDS_KEY: stat " + missing},
		{"mismatched pair, by name", Client{CertFile: p.ClientCert, KeyFile: p.ServerKey, Names: envNames}, "tls config: XDS_CERT, XDS_KEY: tls: private key does not match"},
	}
	for _, tt := range clients {
		t.Run("client/"+tt.name, func(t *testing.T) {
			_, err := tt.c.Config()
			checkErr(t, "Config()", err, tt.want)
		})
	}
	if _, err := (Client{CAFile: notPEM}).Config(); !errors.Is(err, ErrNoCertificates) {
		t.Errorf("Config() with a garbage CA = %v, want ErrNoCertificates", err)
	}
}

func TestConfigShape(t *testing.T) {
	t.Parallel()
	p := tlstest.New(t)
	if cfg, err := (Server{}).Config(); cfg != nil || err != nil {
		t.Errorf("Server{}.Config() = %v, %v; want nil, nil", cfg, err)
	}
	if cfg, err := (Client{}).Config(); cfg != nil || err != nil {
		t.Errorf("Client{}.Config() = %v, %v; want nil, nil", cfg, err)
	}
	s, err := Server{CertFile: p.ServerCert, KeyFile: p.ServerKey}.Config()
	if err != nil {
		t.Fatal(err)
	}
	if s.ClientAuth != tls.NoClientCert || s.ClientCAs != nil || s.MinVersion != tls.VersionTLS12 || len(s.Certificates) != 0 {
		t.Errorf("server config: ClientAuth %v, ClientCAs %v, MinVersion %x, %d Certificates", s.ClientAuth, s.ClientCAs, s.MinVersion, len(s.Certificates))
	}
	m, err := Server{CertFile: p.ServerCert, KeyFile: p.ServerKey, ClientCAFile: p.CA}.Config()
	if err != nil {
		t.Fatal(err)
	}
	if m.ClientAuth != tls.RequireAndVerifyClientCert || m.ClientCAs == nil {
		t.Errorf("mTLS server config: ClientAuth %v, ClientCAs %v", m.ClientAuth, m.ClientCAs)
	}
	c, err := Client{CAFile: p.CA, ServerName: "localhost"}.Config()
	if err != nil {
		t.Fatal(err)
	}
	if c.InsecureSkipVerify || c.RootCAs == nil || c.ServerName != "localhost" || c.GetClientCertificate != nil {
		t.Errorf("client config: InsecureSkipVerify %v, RootCAs %v, ServerName %q, client cert %v", c.InsecureSkipVerify, c.RootCAs, c.ServerName, c.GetClientCertificate != nil)
	}
	if c, _ := (Client{Enable: true}).Config(); c == nil || c.InsecureSkipVerify || c.RootCAs != nil {
		t.Errorf("Client{Enable}.Config() = %+v, want verification against the system roots", c)
	}
}

func serialOf(t *testing.T, c *tls.Certificate) int64 {
	t.Helper()
	if c == nil || c.Leaf == nil {
		t.Fatalf("certificate %v has no parsed leaf", c)
	}
	return c.Leaf.SerialNumber.Int64()
}

func TestServerReload(t *testing.T) {
	t.Parallel()
	p := tlstest.New(t)
	first := serialFromFile(t, p.ServerCert)
	cfg, err := Server{CertFile: p.ServerCert, KeyFile: p.ServerKey, ReloadInterval: time.Nanosecond}.Config()
	if err != nil {
		t.Fatal(err)
	}
	get := func() int64 {
		c, err := cfg.GetCertificate(&tls.ClientHelloInfo{})
		if err != nil {
			t.Fatal(err)
		}
		return serialOf(t, c)
	}
	if got := get(); got != first {
		t.Fatalf("serial = %d, want %d", got, first)
	}
	second := p.ReissueServer(t, time.Now().Add(time.Hour))
	if got := get(); got != second {
		t.Fatalf("after rotation: serial = %d, want %d", got, second)
	}
	// A half-written rotation (key not yet matching) keeps the last pair.
	if err := os.WriteFile(p.ServerKey, []byte("-----BEGIN PRIVATE KEY-----\ntruncated"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := get(); got != second {
		t.Fatalf("with a broken key file: serial = %d, want %d (kept)", got, second)
	}
	if err := os.Remove(p.ServerCert); err != nil {
		t.Fatal(err)
	}
	if got := get(); got != second {
		t.Fatalf("with the cert file gone: serial = %d, want %d (kept)", got, second)
	}
	third := p.ReissueServer(t, time.Now().Add(2*time.Hour))
	if got := get(); got != third {
		t.Fatalf("after the rotation completes: serial = %d, want %d", got, third)
	}
}

func TestReloadAtMostEveryInterval(t *testing.T) {
	t.Parallel()
	p := tlstest.New(t)
	first := serialFromFile(t, p.ServerCert)
	for _, interval := range []time.Duration{0, time.Hour} {
		cfg, err := Server{CertFile: p.ServerCert, KeyFile: p.ServerKey, ReloadInterval: interval}.Config()
		if err != nil {
			t.Fatal(err)
		}
		p.ReissueServer(t, time.Now().Add(time.Hour))
		c, _ := cfg.GetCertificate(&tls.ClientHelloInfo{})
		if got := serialOf(t, c); got != first {
			t.Errorf("ReloadInterval %v: serial right after rotation = %d, want %d (not checked yet)", interval, got, first)
		}
		first = serialFromFile(t, p.ServerCert)
	}
}

func TestClientReload(t *testing.T) {
	t.Parallel()
	p := tlstest.New(t)
	cfg, err := Client{CAFile: p.CA, CertFile: p.ServerCert, KeyFile: p.ServerKey, ReloadInterval: time.Nanosecond}.Config()
	if err != nil {
		t.Fatal(err)
	}
	second := p.ReissueServer(t, time.Now().Add(time.Hour))
	c, err := cfg.GetClientCertificate(&tls.CertificateRequestInfo{})
	if err != nil {
		t.Fatal(err)
	}
	if got := serialOf(t, c); got != second {
		t.Errorf("client certificate serial after rotation = %d, want %d", got, second)
	}
}

func serialFromFile(t *testing.T, certFile string) int64 {
	t.Helper()
	b, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.X509KeyPair(b, mustRead(t, strings.TrimSuffix(certFile, ".pem")+"-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	return serialOf(t, &c)
}

func mustRead(t *testing.T, f string) []byte {
	t.Helper()
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
