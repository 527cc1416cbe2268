package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/wait"
)

// startDevProcess runs the built binary's allot dev as a subprocess with
// args and returns its HTTP base URL once it printed its banner.
func startDevProcess(t *testing.T, bin string, args ...string) string {
	t.Helper()
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, append([]string{"dev", "--http-listen", addr}, args...)...)
	cmd.Cancel = func() error { return cmd.Process.Signal(interruptSignal) }
	cmd.WaitDelay = 10 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	banner := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "Ctrl-C") {
				close(banner)
			}
		}
	}()
	select {
	case <-banner:
	case <-time.After(60 * time.Second):
		t.Fatalf("allot dev printed no banner within 60s: %s", stderr.String())
	}
	return "http://" + addr
}

// A brand-new tenant (no entry, no budget record: the default tier's 100/s,
// burst 10) sending 12 requests a second to one region of allot dev run as
// a real process, over HTTP: in a one-region deployment none is denied; with
// three regions none after the first report round trip (its first request
// asks for its grant at once; the answer arrives within milliseconds on
// loopback, and the test allows 100 ms: the first request at 12/s after it
// is the one at 167 ms) but, once, the key's first decision under its
// grant, which may wait one emission interval of the grant.
func TestNewTenantSubprocess(t *testing.T) {
	bin := buildAllot(t)
	for _, c := range []struct {
		name    string
		regions string
		grace   time.Duration // denials forgiven this long after the first request
	}{
		{"one region", "us-east", 0},
		{"three regions", "us-east,eu-west,ap-south", 100 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			pol := filepath.Join(t.TempDir(), "policy.yaml")
			doc := fmt.Sprintf("version: 1\nregions: [%s]\ndefault_tier: free\nlimits:\n  - {name: tenant, descriptors: [tenant], rate: budget}\ntiers:\n  free:\n    budget: {rate: 100/s, burst: 10}\n",
				strings.ReplaceAll(c.regions, ",", ", "))
			if err := os.WriteFile(pol, []byte(doc), 0o600); err != nil {
				t.Fatal(err)
			}
			base := startDevProcess(t, bin, "--regions", c.regions, "--policy", pol)
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
			var early, restated, late int
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
				if c.grace > 0 && restated == 0 && d.RetryAfterMS <= 20 {
					// The key's first decision under its grant: the key,
					// converted from the cold floor's rate to the grant's
					// (never minting), waits one emission interval of the
					// grant (≥ 50/s here) at most. Once.
					restated++
					t.Logf("request %d, %v after the first: the key's first decision under its grant waits %d ms", k, at.Round(time.Millisecond), d.RetryAfterMS)
					continue
				}
				late++
				t.Errorf("request %d, %v after the first: denied %+v", k, at.Round(time.Millisecond), d)
			}
			t.Logf("%s: of 36 requests at 12/s against 100/s, %d denied within %v of the first, %d after as the key's first decision under its grant, %d otherwise",
				c.name, early, c.grace, restated, late)
		})
	}
}
