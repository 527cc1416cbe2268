package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// DefaultReloadInterval is how often, at most, certificate files are
// checked for changes.
const DefaultReloadInterval = 5 * time.Second

// Server describes a TLS server: its certificate and, for mutual TLS, the
// CA its clients' certificates must chain to.
type Server struct {
	// FlagPrefix names these settings in errors: --<prefix>-cert,
	// --<prefix>-key, --<prefix>-client-ca. Default "tls".
	FlagPrefix string
	// CertFile is the PEM certificate chain, leaf first. Required (with
	// KeyFile) when any other file is set.
	CertFile string
	// KeyFile is the PEM private key of CertFile.
	KeyFile string
	// ClientCAFile, when set, is a PEM bundle of CAs; clients must then
	// present a certificate signed by one of them (RequireAndVerifyClientCert).
	ClientCAFile string
	// ReloadInterval: CertFile and KeyFile are checked for changes at most
	// this often. 0 never reloads. Default DefaultReloadInterval.
	ReloadInterval time.Duration
	// Logger receives reloads and failed reloads (default: discard).
	Logger *slog.Logger
	// Names, when set, names settings in errors by their field's name
	// here (CertFile, KeyFile, ClientCAFile) instead of as flags: for
	// settings that come from environment variables.
	Names map[string]string
}

// DefaultServer returns a Server with the defaults and no files: TLS off.
func DefaultServer() Server {
	return Server{FlagPrefix: "tls", ReloadInterval: DefaultReloadInterval}
}

// Enabled reports whether any file is set, i.e. whether the server speaks TLS.
func (s Server) Enabled() bool {
	return s.CertFile != "" || s.KeyFile != "" || s.ClientCAFile != ""
}

// MutualTLS reports whether clients must present a certificate.
func (s Server) MutualTLS() bool { return s.ClientCAFile != "" }

// Validate reports the first inconsistent setting. It reads no files; Config
// does, and names the file that fails.
func (s Server) Validate() error {
	n := namer{s.FlagPrefix, s.Names}
	switch {
	case s.ReloadInterval < 0:
		return fmt.Errorf("tls config: ReloadInterval: %v: must not be negative", s.ReloadInterval)
	case !s.Enabled():
		return nil
	case s.CertFile == "":
		set := n.flag("client-ca", "ClientCAFile")
		if s.KeyFile != "" {
			set = n.flag("key", "KeyFile")
		}
		return fmt.Errorf("tls config: %s: required when %s is set", n.field("cert", "CertFile"), set)
	case s.KeyFile == "":
		return fmt.Errorf("tls config: %s: required with %s", n.field("key", "KeyFile"), n.flag("cert", "CertFile"))
	}
	return nil
}

// Config builds the server's *tls.Config, or returns nil, nil when TLS is
// off. The certificate is served through GetCertificate (re-read when its
// files change); do not add Certificates to the result, or clients that
// send no server name (those dialling an IP) would get that one instead.
func (s Server) Config() (*tls.Config, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if !s.Enabled() {
		return nil, nil
	}
	n := namer{s.FlagPrefix, s.Names}
	kp, err := loadKeyPair(n, s.CertFile, s.KeyFile, s.ReloadInterval, s.Logger)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return kp.get(), nil
		},
	}
	if s.ClientCAFile != "" {
		pool, err := loadPool(n.field("client-ca", "ClientCAFile"), s.ClientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// TransportCredentials returns gRPC server credentials: TLS from Config, or
// insecure (plaintext) ones when TLS is off. Use with grpc.Creds.
func (s Server) TransportCredentials() (credentials.TransportCredentials, error) {
	cfg, err := s.Config()
	if err != nil || cfg == nil {
		return insecure.NewCredentials(), err
	}
	return credentials.NewTLS(cfg), nil
}

// Client describes a TLS client: whom it trusts, the certificate it shows
// for mutual TLS, and the name it expects the server to have.
type Client struct {
	// FlagPrefix names these settings in errors: --<prefix> (Enable),
	// --<prefix>-ca, --<prefix>-cert, --<prefix>-key,
	// --<prefix>-server-name, --<prefix>-insecure-skip-verify.
	// Default "tls".
	FlagPrefix string
	// Enable turns TLS on with nothing else set: the system roots verify
	// the server. Any other setting turns TLS on too.
	Enable bool
	// CAFile is a PEM bundle of the CAs the server's certificate must chain
	// to. Default: the system roots.
	CAFile string
	// CertFile and KeyFile are this client's PEM certificate and key, for
	// servers that require one (mutual TLS). Both or neither.
	CertFile string
	KeyFile  string
	// ServerName is the name the server's certificate must carry, and the
	// SNI sent. Default: the host dialled.
	ServerName string
	// InsecureSkipVerify accepts any server certificate. Only for tests
	// and emergencies: it allows a man in the middle. Refused together with
	// CAFile, and logged at Warn whenever a config is built.
	InsecureSkipVerify bool
	// ReloadInterval: CertFile and KeyFile are checked for changes at most
	// this often. 0 never reloads. Default DefaultReloadInterval.
	ReloadInterval time.Duration
	// Names, when set, names settings in errors by their field's name
	// ("CAFile", "CertFile", "KeyFile", "ServerName", ...) instead of as
	// flags: environment variables, say, for settings read from the
	// environment. A field it lacks is named as a flag.
	Names map[string]string
	// Logger receives reloads, failed reloads and the InsecureSkipVerify
	// warning (default: discard).
	Logger *slog.Logger
}

// DefaultClient returns a Client with the defaults whose errors name flags
// starting with --<flagPrefix>: TLS off until something is set.
func DefaultClient(flagPrefix string) Client {
	return Client{FlagPrefix: flagPrefix, ReloadInterval: DefaultReloadInterval}
}

// Enabled reports whether the client speaks TLS.
func (c Client) Enabled() bool {
	return c.Enable || c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" || c.ServerName != "" || c.InsecureSkipVerify
}

// Validate reports the first inconsistent setting. It reads no files.
func (c Client) Validate() error {
	n := namer{c.FlagPrefix, c.Names}
	switch {
	case c.ReloadInterval < 0:
		return fmt.Errorf("tls config: ReloadInterval: %v: must not be negative", c.ReloadInterval)
	case c.CertFile != "" && c.KeyFile == "":
		return fmt.Errorf("tls config: %s: required with %s", n.field("key", "KeyFile"), n.flag("cert", "CertFile"))
	case c.KeyFile != "" && c.CertFile == "":
		return fmt.Errorf("tls config: %s: required with %s", n.field("cert", "CertFile"), n.flag("key", "KeyFile"))
	case c.InsecureSkipVerify && c.CAFile != "":
		return fmt.Errorf("tls config: %s: contradicts %s (a CA to verify against, and no verification)",
			n.field("insecure-skip-verify", "InsecureSkipVerify"), n.flag("ca", "CAFile"))
	}
	return nil
}

// Config builds the client's *tls.Config, or returns nil, nil when TLS is
// off (so it can be assigned to go-redis' TLSConfig as is).
func (c Client) Config() (*tls.Config, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if !c.Enabled() {
		return nil, nil
	}
	n := namer{c.FlagPrefix, c.Names}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: c.ServerName,
	}
	if c.InsecureSkipVerify {
		logger(c.Logger).Warn("TLS server certificates are NOT verified", "flag", n.flag("insecure-skip-verify", "InsecureSkipVerify"))
		cfg.InsecureSkipVerify = true
	}
	if c.CAFile != "" {
		pool, err := loadPool(n.field("ca", "CAFile"), c.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if c.CertFile != "" {
		kp, err := loadKeyPair(n, c.CertFile, c.KeyFile, c.ReloadInterval, c.Logger)
		if err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return kp.get(), nil
		}
	}
	return cfg, nil
}

// TransportCredentials returns gRPC client credentials: TLS from Config, or
// insecure (plaintext) ones when TLS is off. Use with
// grpc.WithTransportCredentials.
func (c Client) TransportCredentials() (credentials.TransportCredentials, error) {
	cfg, err := c.Config()
	if err != nil || cfg == nil {
		return insecure.NewCredentials(), err
	}
	return credentials.NewTLS(cfg), nil
}

// loadPool reads a PEM bundle of CA certificates.
func loadPool(name, file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tls config: %s: %w", name, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("tls config: %s: %s: %w", name, file, ErrNoCertificates)
	}
	return pool, nil
}

// ErrNoCertificates: a CA file holds no PEM certificate.
var ErrNoCertificates = errors.New("no PEM certificates")

// namer spells settings as flags with a prefix, or by the names given
// for their fields.
type namer struct {
	prefix string
	names  map[string]string // by field
}

func (n namer) flagPrefix() string {
	if n.prefix == "" {
		return "tls"
	}
	return n.prefix
}

// field names a setting as "--prefix-suffix (Field)", or by its name.
func (n namer) field(suffix, field string) string {
	if s := n.names[field]; s != "" {
		return s
	}
	return fmt.Sprintf("--%s-%s (%s)", n.flagPrefix(), suffix, field)
}

// flag names a setting as --prefix-suffix, or by its name.
func (n namer) flag(suffix, field string) string {
	if s := n.names[field]; s != "" {
		return s
	}
	return "--" + n.flagPrefix() + "-" + suffix
}

func logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return l
}
