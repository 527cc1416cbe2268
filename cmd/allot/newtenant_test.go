package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/wait"
)

// devProcess is allot dev run as a process by a test.
type devProcess struct {
	base   string // http://ADDR of its one HTTP listener
	banner string // what it printed up to its "Ctrl-C" line
}

// startDevProcess runs bin dev --http-listen on a free port with args and
// waits for its banner. At cleanup it interrupts the process, as Ctrl-C
// does, and fails the test unless it exits with status 0 (within 10 s; then
// it is killed).
func startDevProcess(t *testing.T, bin string, args ...string) *devProcess {
	t.Helper()
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, append([]string{"dev", "--http-listen", addr}, args...)...)
	cmd.WaitDelay = 10 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuilder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer cancel()
		if err := cmd.Process.Signal(interruptSignal); err != nil {
			t.Errorf("interrupt allot dev: %v", err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("allot dev, interrupted: %v (want exit status 0)\n%s", err, stderr.String())
			}
		case <-time.After(10 * time.Second):
			cancel()
			t.Errorf("allot dev did not exit within 10 s of an interrupt (killed: %v):\n%s", <-exited, stderr.String())
		}
	})
	banner := make(chan string, 1)
	go func() {
		var b strings.Builder
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
			if strings.HasPrefix(sc.Text(), "Ctrl-C") {
				banner <- b.String()
			}
		}
		close(banner)
	}()
	select {
	case b, ok := <-banner:
		if !ok {
			t.Fatalf("allot dev exited before its banner: %s", stderr.String())
		}
		return &devProcess{base: "http://" + addr, banner: b}
	case <-time.After(60 * time.Second):
		t.Fatalf("allot dev printed no banner within 60s: %s", stderr.String())
	}
	return nil
}

// syncBuilder is a strings.Builder safe for a process's writes and a
// test's reads.
type syncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuilder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuilder) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A brand-new tenant (no entry, no budget record: the default tier's 100/s,
// burst 10) sending 12 requests a second to one region of allot dev run as
// a real process, over HTTP: in a one-region deployment none is denied; with
// three regions none after the first report round trip. Its first request
// is decided under the region's cold floor (a burst of one) and asks for
// its grant at once (within 20 ms of an earlier early report); the answer
// arrives within milliseconds on loopback, and the test allows 50 ms: the
// next request at 12/s comes at 83 ms. The key its first request spent is
// restated under the grant as the grant arrives, so it refills at the
// grant's rate from then on and the next request finds room
// (allot_cold_restates_total counts it).
func TestNewTenantSubprocess(t *testing.T) {
	bin := buildAllot(t)
	for _, c := range []struct {
		name    string
		regions string
		grace   time.Duration // denials forgiven this long after the first request
	}{
		{"one region", "us-east", 0},
		{"three regions", "us-east,eu-west,ap-south", 50 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			pol := filepath.Join(t.TempDir(), "policy.yaml")
			doc := fmt.Sprintf("version: 1\nregions: [%s]\ndefault_tier: free\nlimits:\n  - {name: tenant, descriptors: [tenant], rate: budget}\ntiers:\n  free:\n    budget: {rate: 100/s, burst: 10}\n",
				strings.ReplaceAll(c.regions, ",", ", "))
			if err := os.WriteFile(pol, []byte(doc), 0o600); err != nil {
				t.Fatal(err)
			}
			base := startDevProcess(t, bin, "--regions", c.regions, "--policy", pol).base
			// A running deployment: its leader past learning, every region
			// reporting.
			n := strings.Count(c.regions, ",") + 1
			wait.Until(t, 30*time.Second, func() error {
				resp, err := http.Get(base + "/v1/status")
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				var st struct {
					IsLeader bool              `json:"is_leader"`
					Learning bool              `json:"learning"`
					Regions  []json.RawMessage `json:"regions"`
				}
				if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
					return err
				}
				if !st.IsLeader || st.Learning || len(st.Regions) != n {
					return fmt.Errorf("coordinator: leader %v, learning %v, %d regions of %d", st.IsLeader, st.Learning, len(st.Regions), n)
				}
				return nil
			})
			url := base + "/regions/us-east/v1/decide"
			pace := time.NewTicker(time.Second / 12)
			defer pace.Stop()
			start := time.Now()
			var early, late int
			for k := range 36 { // 3 s at 12/s
				if k > 0 {
					<-pace.C
				}
				resp, err := http.Post(url, "application/json", strings.NewReader(`{"descriptors":{"tenant":"fresh"},"cost":1}`))
				if err != nil {
					t.Fatal(err)
				}
				var d decideAnswer
				err = json.NewDecoder(resp.Body).Decode(&d)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("request %d: %d %v", k, resp.StatusCode, err)
				}
				if d.Allowed {
					continue
				}
				at := time.Since(start)
				if at < c.grace {
					early++
					t.Logf("request %d, %v after the first: denied before the first round trip ended (%+v)", k, at.Round(time.Millisecond), d)
					continue
				}
				late++
				t.Errorf("request %d, %v after the first: denied %+v", k, at.Round(time.Millisecond), d)
			}
			t.Logf("%s: of 36 requests at 12/s against 100/s, %d denied within %v of the first, %d after",
				c.name, early, c.grace, late)
			if c.grace > 0 {
				resp, err := http.Get(base + "/metrics")
				if err != nil {
					t.Fatal(err)
				}
				m, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if !strings.Contains(string(m), `allot_cold_restates_total{region="us-east",result="restated"} 1`) {
					t.Errorf("/metrics does not count the one key restated under its grant in us-east:\n%s", grepLines(string(m), "allot_cold_restates_total"))
				}
			}
		})
	}
}
