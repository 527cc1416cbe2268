package tlsconfig

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/tlstest"
)

// clientCase is one client configuration and whether an mTLS server that
// trusts p.CA for clients must accept it.
type clientCase struct {
	name   string
	c      Client
	accept bool
}

func clientCases(p *tlstest.PKI) []clientCase {
	return []clientCase{
		{"ca and client cert", Client{CAFile: p.CA, CertFile: p.ClientCert, KeyFile: p.ClientKey}, true},
		{"no client cert", Client{CAFile: p.CA}, false},
		{"client cert from another CA", Client{CAFile: p.CA, CertFile: p.OtherClientCert, KeyFile: p.OtherClientKey}, false},
		{"system roots only", Client{Enable: true, CertFile: p.ClientCert, KeyFile: p.ClientKey}, false},
		{"wrong server name", Client{CAFile: p.CA, CertFile: p.ClientCert, KeyFile: p.ClientKey, ServerName: "redis.example"}, false},
		// Skipping verification on the client does not get it past the
		// server's check of client certificates.
		{"skip verify, no client cert", Client{InsecureSkipVerify: true}, false},
	}
}

func TestHTTPSMutualTLS(t *testing.T) {
	t.Parallel()
	p := tlstest.New(t)
	addr := serveHTTPS(t, Server{CertFile: p.ServerCert, KeyFile: p.ServerKey, ClientCAFile: p.CA})
	for _, tt := range clientCases(p) {
		t.Run(tt.name, func(t *testing.T) {
			cn, err := getHTTPS(t, tt.c, addr)
			switch {
			case tt.accept && (err != nil || cn != "allot-client"):
				t.Errorf("GET = %q, %v; want 200 from client allot-client", cn, err)
			case !tt.accept && err == nil:
				t.Errorf("GET = %q, nil; want a TLS error", cn)
			case !tt.accept:
				t.Logf("refused: %v", err)
			}
		})
	}
}

func TestHTTPSWithoutClientAuth(t *testing.T) {
	t.Parallel()
	p := tlstest.New(t)
	addr := serveHTTPS(t, Server{CertFile: p.ServerCert, KeyFile: p.ServerKey})
	if cn, err := getHTTPS(t, Client{CAFile: p.CA}, addr); err != nil || cn != "" {
		t.Errorf("GET without a client cert = %q, %v; want 200 and no client", cn, err)
	}
	if _, err := getHTTPS(t, Client{Enable: true}, addr); err == nil {
		t.Error("GET trusting only the system roots succeeded; want unknown authority")
	}
}

// A rotated server certificate is served to the next connection.
func TestHTTPSServesRotatedCertificate(t *testing.T) {
	t.Parallel()
	p := tlstest.New(t)
	addr := serveHTTPS(t, Server{CertFile: p.ServerCert, KeyFile: p.ServerKey, ReloadInterval: time.Nanosecond})
	first := serialFromFile(t, p.ServerCert)
	cfg, err := Client{CAFile: p.CA}.Config()
	if err != nil {
		t.Fatal(err)
	}
	serial := func() int64 {
		c, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	if got := serial(); got != first {
		t.Fatalf("served serial = %d, want %d", got, first)
	}
	second := p.ReissueServer(t, time.Now().Add(time.Hour))
	if got := serial(); got != second {
		t.Fatalf("after rotation: served serial = %d, want %d", got, second)
	}
}

// serveHTTPS serves, until the test ends, a handler answering with the
// client certificate's common name.
func serveHTTPS(t *testing.T, s Server) string {
	t.Helper()
	cfg, err := s.Config()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if len(r.TLS.PeerCertificates) > 0 {
				_, _ = io.WriteString(w, r.TLS.PeerCertificates[0].Subject.CommonName)
			}
		}),
		TLSConfig:         cfg,
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          discardLog(),
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(l, "", "") }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("ServeTLS = %v", err)
		}
	})
	return l.Addr().String()
}

func getHTTPS(t *testing.T, c Client, addr string) (string, error) {
	t.Helper()
	cfg, err := c.Config()
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{TLSClientConfig: cfg}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	resp, err := hc.Get("https://" + addr + "/")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d", resp.StatusCode)
	}
	return string(b), err
}

func TestGRPCMutualTLS(t *testing.T) {
	t.Parallel()
	p := tlstest.New(t)
	creds, err := Server{CertFile: p.ServerCert, KeyFile: p.ServerKey, ClientCAFile: p.CA}.TransportCredentials()
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.Creds(creds))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- gs.Serve(l) }()
	t.Cleanup(func() {
		gs.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve = %v", err)
		}
	})
	for _, tt := range clientCases(p) {
		t.Run(tt.name, func(t *testing.T) {
			creds, err := tt.c.TransportCredentials()
			if err != nil {
				t.Fatal(err)
			}
			conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(creds))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
			switch {
			case tt.accept && (err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING):
				t.Errorf("Check = %v, %v; want SERVING", resp, err)
			case !tt.accept && status.Code(err) != codes.Unavailable:
				t.Errorf("Check = %v, %v; want Unavailable", resp, err)
			case !tt.accept:
				t.Logf("refused: %v", err)
			}
		})
	}
	// TLS off on both sides is plaintext gRPC.
	if c, err := (Client{}).TransportCredentials(); err != nil || c.Info().SecurityProtocol != "insecure" {
		t.Errorf("Client{}.TransportCredentials() = %v, %v; want insecure", c.Info(), err)
	}
	if c, err := (Server{}).TransportCredentials(); err != nil || c.Info().SecurityProtocol != "insecure" {
		t.Errorf("Server{}.TransportCredentials() = %v, %v; want insecure", c.Info(), err)
	}
}

// redis-server 7.0 from Debian is built with TLS (--tls-port).
func TestRedisMutualTLS(t *testing.T) {
	t.Parallel()
	p := tlstest.New(t)
	port := freePort(t)
	redistest.Start(t,
		"--tls-port", strconv.Itoa(port),
		"--tls-cert-file", p.ServerCert,
		"--tls-key-file", p.ServerKey,
		"--tls-ca-cert-file", p.CA,
		"--tls-auth-clients", "yes",
	)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for _, tt := range clientCases(p) {
		t.Run(tt.name, func(t *testing.T) {
			o := &redis.UniversalOptions{Addrs: []string{addr}, MaxRetries: -1, DialTimeout: 5 * time.Second}
			if err := tt.c.ApplyRedis(o); err != nil {
				t.Fatal(err)
			}
			if o.TLSConfig == nil {
				t.Fatal("ApplyRedis left TLSConfig nil")
			}
			rc := redis.NewUniversalClient(o)
			defer rc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			pong, err := rc.Ping(ctx).Result()
			switch {
			case tt.accept && (err != nil || pong != "PONG"):
				t.Errorf("PING = %q, %v; want PONG", pong, err)
			case !tt.accept && err == nil:
				t.Errorf("PING = %q, nil; want a TLS error", pong)
			case !tt.accept:
				t.Logf("refused: %v", err)
			}
		})
	}
	// TLS off leaves the options alone.
	o := &redis.UniversalOptions{}
	if err := (Client{}).ApplyRedis(o); err != nil || o.TLSConfig != nil {
		t.Errorf("Client{}.ApplyRedis: TLSConfig %v, err %v; want nil, nil", o.TLSConfig, err)
	}
}

func TestEtcdClientTLS(t *testing.T) {
	t.Parallel()
	p := tlstest.New(t)
	endpoint := startEtcdTLS(t, p)
	tests := []clientCase{
		{"ca and client cert", Client{CAFile: p.CA, CertFile: p.ClientCert, KeyFile: p.ClientKey}, true},
		{"no client cert", Client{CAFile: p.CA}, false},
		{"client cert from another CA", Client{CAFile: p.CA, CertFile: p.OtherClientCert, KeyFile: p.OtherClientKey}, false},
		{"system roots only", Client{Enable: true, CertFile: p.ClientCert, KeyFile: p.ClientKey}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
			if err := tt.c.ApplyEtcd(&cfg); err != nil {
				t.Fatal(err)
			}
			cli, err := clientv3.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			timeout := 10 * time.Second
			if !tt.accept {
				timeout = 2 * time.Second // long enough for a handshake to fail
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			_, err = cli.Put(ctx, "k", tt.name)
			if err == nil {
				var r *clientv3.GetResponse
				r, err = cli.Get(ctx, "k")
				if err == nil && (len(r.Kvs) != 1 || string(r.Kvs[0].Value) != tt.name) {
					err = fmt.Errorf("Get(k) = %v", r.Kvs)
				}
			}
			switch {
			case tt.accept && err != nil:
				t.Errorf("Put/Get = %v, want success", err)
			case !tt.accept && err == nil:
				t.Error("Put/Get succeeded, want a TLS failure")
			case !tt.accept:
				// The client only says its deadline passed; a handshake
				// with the same config shows why.
				herr := handshake(endpoint, cfg.TLS)
				if herr == nil || !strings.Contains(herr.Error(), "tls: ") {
					t.Errorf("handshake with the same config = %v, want a TLS error", herr)
				}
				t.Logf("refused: %v (handshake: %v)", err, herr)
			}
		})
	}
}

// handshake connects to endpoint (an https URL) with cfg and reads, so that
// a server refusing the client certificate (after the TLS 1.3 handshake)
// shows as an error.
func handshake(endpoint string, cfg *tls.Config) error {
	u, err := url.Parse(endpoint)
	if err != nil {
		return err
	}
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"}
	d := &net.Dialer{Timeout: 2 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", u.Host, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(2 * time.Second)); err != nil {
		return err
	}
	if _, err := io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"); err != nil {
		return err
	}
	_, err = c.Read(make([]byte, 1))
	return err
}

// startEtcdTLS starts an embedded etcd whose client port requires TLS with
// client certificates from p.CA, and returns its https endpoint.
func startEtcdTLS(t *testing.T, p *tlstest.PKI) string {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "tls"
	cfg.Dir = t.TempDir()
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	client := url.URL{Scheme: "https", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))}
	peer := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	cfg.TickMs, cfg.ElectionMs = 10, 100
	cfg.ClientTLSInfo.CertFile = p.ServerCert
	cfg.ClientTLSInfo.KeyFile = p.ServerKey
	cfg.ClientTLSInfo.TrustedCAFile = p.CA
	cfg.ClientTLSInfo.ClientCertAuth = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("start embedded etcd: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatalf("embedded etcd failed: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("embedded etcd not ready within 30s")
	}
	return client.String()
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func discardLog() *log.Logger { return log.New(io.Discard, "", 0) }
