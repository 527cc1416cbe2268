package serve_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/allot-dev/allot/internal/serve"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// component is what the servers' handlers need: alive while it runs.
type component struct{ alive atomic.Bool }

func (c *component) run(ctx context.Context) error {
	c.alive.Store(true)
	<-ctx.Done()
	c.alive.Store(false)
	return nil
}

// Under load on HTTP and gRPC, shutting the group down fails no request
// that a listener accepted: each finds the component behind it running
// (the component stops only after both listeners drained); requests after
// the listeners closed are refused at connect, never answered with an
// error.
func TestShutdownUnderLoadFailsNoAcceptedRequest(t *testing.T) {
	comp := &component{}
	slow := func() { <-time.After(20 * time.Millisecond) } // a request in flight at the cut
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		slow()
		if !comp.alive.Load() {
			http.Error(w, "component stopped", http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}), ReadHeaderTimeout: time.Second}
	gs := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		var in emptypb.Empty
		if err := stream.RecvMsg(&in); err != nil {
			return err
		}
		slow()
		if !comp.alive.Load() {
			return status.Error(codes.Internal, "component stopped")
		}
		return stream.SendMsg(&emptypb.Empty{})
	}))
	var g serve.Group
	g.HTTP(httpSrv, hl, nil)
	g.GRPC(gs, gl)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx, comp.run) }()

	conn, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	var ok, refused atomic.Int64
	var mu sync.Mutex
	var failures []string
	failed := func(format string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := hc.Get("http://" + hl.Addr().String())
				if err != nil {
					refused.Add(1) // (closed listener: not accepted)
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					failed("HTTP %d %s", resp.StatusCode, body)
					continue
				}
				ok.Add(1)
			}
		})
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
				err := conn.Invoke(cctx, "/test.Svc/Do", &emptypb.Empty{}, &emptypb.Empty{})
				ccancel()
				switch status.Code(err) {
				case codes.OK:
					ok.Add(1)
				case codes.Unavailable, codes.DeadlineExceeded:
					refused.Add(1) // (the server stopped accepting)
				default:
					failed("gRPC %v", err)
				}
			}
		})
	}
	// Load, then the cut while requests are in flight.
	for ok.Load() < 40 {
		<-time.After(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	close(stop)
	wg.Wait()
	if comp.alive.Load() {
		t.Error("the component still runs after Run returned")
	}
	if len(failures) > 0 {
		t.Errorf("%d accepted requests failed during the shutdown, e.g. %s", len(failures), failures[0])
	}
	t.Logf("%d requests served, %d refused once the listeners closed", ok.Load(), refused.Load())
}

// A component that fails stops the servers (and then the others).
func TestComponentFailureStopsTheGroup(t *testing.T) {
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var g serve.Group
	g.HTTP(&http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: time.Second}, hl, nil)
	boom := errors.New("boom")
	other := &component{}
	err = g.Run(context.Background(), func(context.Context) error { return boom }, other.run)
	if !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want boom", err)
	}
	if other.alive.Load() {
		t.Error("the other component still runs")
	}
	if resp, err := http.Get("http://" + hl.Addr().String()); err == nil {
		resp.Body.Close()
		t.Error("the HTTP listener still accepts")
	}
}
