package tlsconfig_test

import (
	"fmt"

	"github.com/allot-dev/allot/internal/tlsconfig"
)

// A client to a Redis reached by DNS name, verified against the system
// roots; errors name the flags the settings came from.
func ExampleClient() {
	c := tlsconfig.DefaultClient("redis-tls")
	c.Enable = true
	c.ServerName = "redis.us-east.internal"
	cfg, err := c.Config()
	fmt.Println(cfg.ServerName, cfg.InsecureSkipVerify, err)

	c.CertFile = "/etc/allot/redis-client.pem" // without --redis-tls-key
	fmt.Println(c.Validate())

	off, err := tlsconfig.DefaultClient("etcd-tls").Config()
	fmt.Println(off == nil, err)
	// Output:
	// redis.us-east.internal false <nil>
	// tls config: --redis-tls-key (KeyFile): required with --redis-tls-cert
	// true <nil>
}

// A server requiring client certificates names each missing piece.
func ExampleServer_Validate() {
	s := tlsconfig.DefaultServer()
	s.ClientCAFile = "/etc/allot/clients-ca.pem"
	fmt.Println(s.Validate())
	s.CertFile = "/etc/allot/tls.crt"
	fmt.Println(s.Validate())
	s.KeyFile = "/etc/allot/tls.key"
	fmt.Println(s.Validate(), s.MutualTLS())
	// Output:
	// tls config: --tls-cert (CertFile): required when --tls-client-ca is set
	// tls config: --tls-key (KeyFile): required with --tls-cert
	// <nil> true
}
