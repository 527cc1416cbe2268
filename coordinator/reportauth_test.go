package coordinator

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/allot-dev/allot/internal/etcdtest"
	"github.com/allot-dev/allot/internal/state"
	"github.com/allot-dev/allot/internal/wait"
	allotv1 "github.com/allot-dev/allot/proto/allot/v1"
)

// reportLeader is a leading coordinator with a policy and a first rebalance
// behind it (so it takes reports), whose allot.v1.Coordinator is served by
// serve.
type reportLeader struct {
	n   *node
	reg *prometheus.Registry
}

func startReportLeader(t *testing.T, auth ReportAuth) *reportLeader {
	t.Helper()
	srv := etcdtest.Start(t)
	if _, err := state.New(srv.Client(t), "").ApplyPolicy(context.Background(), examplePolicy(t), 0, "test"); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	n := startNodeWith(t, srv, "solo", func(c *Coordinator) {
		c.cfg.Reports, c.cfg.Registerer = auth, reg // before Run and RegisterGRPC
	})
	wait.Until(t, 10*time.Second, func() error {
		st, err := n.c.Status(context.Background())
		if err != nil || !st.IsLeader || st.LastRebalance == "" {
			return fmt.Errorf("not leading with a policy yet: %+v, %w", st, err)
		}
		return nil
	})
	return &reportLeader{n: n, reg: reg}
}

// serve serves the coordinator's gRPC API with opts and returns a client
// dialled with dial.
func (l *reportLeader) serve(t *testing.T, opts []grpc.ServerOption, dial ...grpc.DialOption) allotv1.CoordinatorClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(opts...)
	l.n.c.RegisterGRPC(gs, Auth{Insecure: true})
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	if len(dial) == 0 {
		dial = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.NewClient(lis.Addr().String(), dial...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return allotv1.NewCoordinatorClient(conn)
}

// forged is a report as anyone could send it: a real region, a pod name,
// an impossible epoch and a tenant of its own.
func forged() *allotv1.ReportRequest {
	return &allotv1.ReportRequest{Region: "us-east", Pod: "us-east-a", IntervalMs: 100, AppliedEpoch: 1<<64 - 1,
		Usage: []*allotv1.TenantUsage{{Tenant: "t-forged", Offered: 1e6, Admitted: 1e6}}}
}

func withToken(tok string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)
}

// An unauthenticated report is refused before it reaches the leader: the
// leader's state (pods, tenants, report counts) is as before.
func TestReportsNeedTheToken(t *testing.T) {
	l := startReportLeader(t, ReportAuth{Token: "r3gion"})
	cl := l.serve(t, nil)
	before, err := l.n.c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		ctx    context.Context
		reason string
		msg    string
	}{
		{"no token", context.Background(), "no_credentials", "--report-token-file"},
		{"wrong token", withToken("guess"), "wrong_token", "not this coordinator's"},
		{"empty token", withToken(""), "wrong_token", "not this coordinator's"},
		{"token prefix", withToken("r3gio"), "wrong_token", "not this coordinator's"},
		{"admin scheme", metadata.AppendToOutgoingContext(context.Background(), "authorization", "r3gion"), "no_credentials", "Bearer"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			was := l.rejected(c.reason)
			_, err := cl.Report(c.ctx, forged())
			if status.Code(err) != codes.Unauthenticated || !strings.Contains(status.Convert(err).Message(), c.msg) {
				t.Errorf("Report(%s) = %v, want Unauthenticated saying %q", c.name, err, c.msg)
			}
			if got := l.rejected(c.reason); got != was+1 {
				t.Errorf("allot_coordinator_reports_rejected_total{reason=%q} = %v, want %v", c.reason, got, was+1)
			}
		})
	}
	after, err := l.n.c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if after.Tenants != before.Tenants || regionPods(after) != 0 {
		t.Errorf("after refused reports: %d tenants (before %d), %d pods; want the state unchanged", after.Tenants, before.Tenants, regionPods(after))
	}
	if n := testutil.ToFloat64(l.n.c.m.reports.WithLabelValues("us-east", "accepted")); n != 0 {
		t.Errorf("the leader took %v refused reports", n)
	}

	r, err := cl.Report(withToken("r3gion"), &allotv1.ReportRequest{Region: "us-east", Pod: "us-east-a", IntervalMs: 100,
		Usage: []*allotv1.TenantUsage{{Tenant: "t42", Offered: 10, Admitted: 10}}})
	if err != nil || !r.GetAccepted() || r.GetLeaseMs() != l.n.c.cfg.Lease.Milliseconds() {
		t.Fatalf("Report with the token = %v, %v; want accepted with a lease", r, err)
	}
	if st, _ := l.n.c.Status(context.Background()); regionPods(st) != 1 {
		t.Errorf("after an accepted report: %d pods, want 1", regionPods(st))
	}
}

// rejected returns allot_coordinator_reports_rejected_total{reason} as the
// registry exports it (-1: not exported).
func (l *reportLeader) rejected(reason string) float64 {
	mfs, _ := l.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "allot_coordinator_reports_rejected_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}

func regionPods(s Status) int {
	n := 0
	for _, r := range s.Regions {
		n += r.Pods
	}
	return n
}

// --insecure-reports takes reports without credentials; the zero ReportAuth
// takes none, and says what to configure.
func TestInsecureAndUnconfiguredReports(t *testing.T) {
	t.Run("insecure", func(t *testing.T) {
		l := startReportLeader(t, ReportAuth{Insecure: true})
		cl := l.serve(t, nil)
		if r, err := cl.Report(context.Background(), &allotv1.ReportRequest{Region: "us-east", Pod: "p", IntervalMs: 100}); err != nil || !r.GetAccepted() {
			t.Errorf("Report to an --insecure-reports coordinator = %v, %v; want accepted", r, err)
		}
	})
	t.Run("unconfigured", func(t *testing.T) {
		l := startReportLeader(t, ReportAuth{})
		cl := l.serve(t, nil)
		for _, ctx := range []context.Context{context.Background(), withToken("anything")} {
			_, err := cl.Report(ctx, &allotv1.ReportRequest{Region: "us-east", Pod: "p", IntervalMs: 100})
			if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "--insecure-reports") {
				t.Errorf("Report to a coordinator without report auth = %v, want Unauthenticated naming the flags", err)
			}
		}
	})
}

// A client certificate the server verified authenticates a report without a
// token; TLS alone (no client certificate asked for) does not.
func TestClientCertAuthenticatesReports(t *testing.T) {
	pki := newTestPKI(t)
	l := startReportLeader(t, ReportAuth{Token: "r3gion"})
	mutual := l.serve(t,
		[]grpc.ServerOption{grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pki.server},
			ClientCAs: pki.pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}))},
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.client},
			ServerName: "coordinator", MinVersion: tls.VersionTLS12})))
	if r, err := mutual.Report(context.Background(), &allotv1.ReportRequest{Region: "us-east", Pod: "p", IntervalMs: 100}); err != nil || !r.GetAccepted() {
		t.Errorf("Report over mutual TLS without a token = %v, %v; want accepted", r, err)
	}
	serverOnly := l.serve(t,
		[]grpc.ServerOption{grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pki.server}, MinVersion: tls.VersionTLS12}))},
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pki.pool, ServerName: "coordinator", MinVersion: tls.VersionTLS12})))
	if _, err := serverOnly.Report(context.Background(), &allotv1.ReportRequest{Region: "us-east", Pod: "p", IntervalMs: 100}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Report over server-only TLS without a token = %v, want Unauthenticated", err)
	}
}

func TestReportAuthValidate(t *testing.T) {
	for _, c := range []struct {
		a    ReportAuth
		want string
	}{
		{ReportAuth{}, ""},
		{ReportAuth{Token: "abc-DEF_123.~"}, ""},
		{ReportAuth{Insecure: true}, ""},
		{ReportAuth{Token: "abc", Insecure: true}, "choose one"},
		{ReportAuth{Token: "a b"}, "printable ASCII"},
		{ReportAuth{Token: "a\nb"}, "printable ASCII"},
		{ReportAuth{Token: "é"}, "printable ASCII"},
	} {
		err := c.a.Validate()
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v.Validate() = %v, want %q", c.a, err, c.want)
		}
	}
	cfg := DefaultConfig()
	cfg.Reports = ReportAuth{Token: "a b"}
	var fe *FieldError
	if err := cfg.ValidateSettings(); !errors.As(err, &fe) || fe.Field != "Reports" {
		t.Errorf("Config.ValidateSettings() with a bad token = %v, want a FieldError on Reports", err)
	}
}

// testPKI is a CA with a server certificate (for "coordinator") and a client
// certificate it signed.
type testPKI struct {
	pool           *x509.CertPool
	server, client tls.Certificate
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey := key()
	caTpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTpl, caTpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage) tls.Certificate {
		k := key()
		tpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn}, DNSNames: []string{cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
		der, err := x509.CreateCertificate(rand.Reader, tpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k}
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &testPKI{pool: pool, server: issue(2, "coordinator", x509.ExtKeyUsageServerAuth), client: issue(3, "us-east-a", x509.ExtKeyUsageClientAuth)}
}
