package main

import (
	"crypto/tls"
	"strings"

	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/allot-dev/allot/internal/tlsconfig"
)

// serverTLSFlags adds --tls-cert, --tls-key and --tls-client-ca: TLS (and
// with a client CA, mutual TLS) for a command's gRPC and HTTP listeners.
func serverTLSFlags(f *pflag.FlagSet, s *tlsconfig.Server) {
	*s = tlsconfig.DefaultServer()
	f.StringVar(&s.CertFile, "tls-cert", "", "PEM certificate of this server's gRPC and HTTP listeners (default: plaintext)")
	f.StringVar(&s.KeyFile, "tls-key", "", "PEM key of --tls-cert")
	f.StringVar(&s.ClientCAFile, "tls-client-ca", "", "PEM CA bundle; clients must present a certificate it signed (mutual TLS)")
}

// clientTLSFlags adds --<prefix>, --<prefix>-ca, -cert, -key, -server-name
// and -insecure-skip-verify for a TLS client named by prefix.
func clientTLSFlags(f *pflag.FlagSet, c *tlsconfig.Client, prefix, what string) {
	*c = tlsconfig.DefaultClient(prefix)
	f.BoolVar(&c.Enable, prefix, false, "use TLS to "+what+" (implied by any other --"+prefix+"-* flag)")
	f.StringVar(&c.CAFile, prefix+"-ca", "", "PEM CA bundle that "+what+"'s certificate must chain to (default: system roots)")
	f.StringVar(&c.CertFile, prefix+"-cert", "", "PEM client certificate for "+what+" (mutual TLS)")
	f.StringVar(&c.KeyFile, prefix+"-key", "", "PEM key of --"+prefix+"-cert")
	f.StringVar(&c.ServerName, prefix+"-server-name", "", "name "+what+"'s certificate must carry (default: the host dialled)")
	f.BoolVar(&c.InsecureSkipVerify, prefix+"-insecure-skip-verify", false, "accept any certificate from "+what+" (tests only)")
}

// serverOptions returns gRPC server options and the HTTP TLS config (nil:
// plaintext) for s.
func serverOptions(s tlsconfig.Server) ([]grpc.ServerOption, *tls.Config, error) {
	if !s.Enabled() {
		return nil, nil, nil
	}
	if err := s.Validate(); err != nil {
		return nil, nil, usageError{err}
	}
	creds, err := s.TransportCredentials()
	if err != nil {
		return nil, nil, err
	}
	hc, err := s.Config()
	if err != nil {
		return nil, nil, err
	}
	return []grpc.ServerOption{grpc.Creds(creds)}, hc, nil
}

// etcdTLS applies c to an etcd client config; https:// endpoints turn TLS on.
func etcdTLS(cfg *clientv3.Config, c tlsconfig.Client) error {
	for _, e := range cfg.Endpoints {
		if strings.HasPrefix(e, "https://") {
			c.Enable = true
		}
	}
	if !c.Enabled() {
		return nil
	}
	if err := c.Validate(); err != nil {
		return usageError{err}
	}
	return c.ApplyEtcd(cfg)
}
