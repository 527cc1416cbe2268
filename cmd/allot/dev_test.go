package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/wait"
)

// buildAllot builds the allot binary once per test binary run.
func buildAllot(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "allot")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// The README's first command, as a newcomer runs it: the built binary as a
// subprocess; a pinned budget; the seed's trace through the region's HTTP
// API; a 429 with Retry-After from forward-auth; the decision in /metrics.
func TestDevSubprocess(t *testing.T) {
	bin := buildAllot(t)
	d := startDevProcess(t, bin)
	base := d.base
	for _, want := range []string{base + "/regions/us-east/v1/decide", "region eu-west", "region ap-south", "allot budget set"} {
		if !strings.Contains(d.banner, want) {
			t.Errorf("banner lacks %q:\n%s", want, d.banner)
		}
	}

	run := func(args ...string) string {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("allot %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	run("budget", "set", "t1", "--rate", "5/s", "--burst", "3", "--mode", "pinned", "--home", "us-east", "--coordinator", base)
	// A second budget, written after t1's, tells when t1's has reached the
	// region (the pods apply etcd's events in order) without touching t1's
	// key, which must be fully rested for the trace.
	run("budget", "set", "probe", "--rate", "5/s", "--burst", "3", "--mode", "pinned", "--home", "us-east", "--coordinator", base)

	decideAs := func(tenant string) decideAnswer {
		resp, err := http.Post(base+"/regions/us-east/v1/decide", "application/json", strings.NewReader(`{"descriptors":{"tenant":"`+tenant+`"},"cost":1}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var d decideAnswer
		if err := json.NewDecoder(resp.Body).Decode(&d); err != nil || resp.StatusCode != 200 {
			t.Fatalf("decide: %d %v", resp.StatusCode, err)
		}
		return d
	}
	decide := func() decideAnswer { return decideAs("t1") }
	// Both are pinned to us-east: the leader moves each to its whole budget
	// once the other regions acknowledged grants of zero. The probe's
	// traffic may have it moved sooner (a tenant's first requests are a
	// step, rebalanced as they are reported), so first wait until the
	// leader holds t1's whole budget in us-east; the pod has it pushed at
	// once. Then once the probe admits exactly its burst of 3 at once (its
	// key resting 700 ms between tries), t1's key holds its whole budget too.
	wait.Until(t, 20*time.Second, func() error {
		resp, err := http.Get(base + "/v1/shares/t1")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var sv struct {
			Regions []struct {
				Region  string  `json:"region"`
				Rate    float64 `json:"rate"`
				Burst   int64   `json:"burst"`
				Granted bool    `json:"granted"`
			} `json:"regions"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&sv); err != nil {
			return err
		}
		for _, r := range sv.Regions {
			if r.Region == "us-east" && r.Granted && r.Rate == 5 && r.Burst == 3 {
				return nil
			}
		}
		return fmt.Errorf("the leader has not granted t1's whole budget to us-east yet: %+v", sv.Regions)
	})
	wait.Until(t, 20*time.Second, func() error {
		var got []decideAnswer
		for range 4 {
			got = append(got, decideAs("probe"))
		}
		if got[0].Allowed && got[0].Remaining == 2 && got[2].Allowed && !got[3].Allowed {
			return nil
		}
		time.Sleep(700 * time.Millisecond) // let the probe's key rest (3 units at 5/s)
		return fmt.Errorf("the probe's whole budget has not reached us-east yet: %+v", got)
	})

	// The seed's trace in real time: allowed ×3 (remaining 2, 1, 0), then
	// denied with ~200 ms; 250 ms later one allowed, the next denied ~150 ms.
	// Real time runs on while the requests travel: the pod decided each
	// request at some instant between its send and its answer. A denial's
	// retry is the trace's allow_at (200 ms, then 400 ms after the first
	// request's instant) less the denied request's instant, so it lies in
	// [send₀ + allow_at − answerᵢ, answer₀ + allow_at − sendᵢ].
	t0 := time.Now()
	var got []decideAnswer
	var at, back []time.Duration
	call := func() {
		sent := time.Since(t0)
		got = append(got, decide())
		at = append(at, sent)
		back = append(back, time.Since(t0))
	}
	call()
	call()
	call()
	call()
	// The trace's second instant is 250 ms of real time later.
	<-time.After(time.Until(t0.Add(250 * time.Millisecond)))
	call()
	call()
	want := []struct {
		allowed   bool
		remaining int64
		allowAtMS int64
	}{{true, 2, 0}, {true, 1, 0}, {true, 0, 0}, {false, 0, 200}, {true, 0, 0}, {false, 0, 400}}
	for i, w := range want {
		g := got[i]
		var lo, hi int64
		if !w.allowed {
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			lo = int64(math.Floor(ms(at[0]) + float64(w.allowAtMS) - ms(back[i])))
			hi = int64(math.Ceil(ms(back[0]) + float64(w.allowAtMS) - ms(at[i])))
		}
		// (± 1 ms: retry_after is rounded to whole milliseconds.)
		if g.Allowed != w.allowed || g.Remaining != w.remaining || g.RetryAfterMS > hi+1 || g.RetryAfterMS < lo-1 {
			t.Errorf("step %d sent at +%v, answered at +%v: %+v, want allowed %v remaining %d retry in [%d, %d] ms", i, at[i], back[i], g, w.allowed, w.remaining, lo, hi)
		}
	}

	req, _ := http.NewRequest("GET", base+"/regions/us-east/v1/forward-auth", nil)
	req.Header.Set("X-Allot-Tenant", "t1")
	for range 5 {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 429 {
			if ra := resp.Header.Get("Retry-After"); ra != "1" {
				t.Errorf("429 with Retry-After %q, want 1", ra)
			}
			break
		}
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(m), `allot_decisions_total{limit="tenant",region="us-east",result="denied"}`) {
		t.Errorf("/metrics lacks the denial of t1")
	}
}

type decideAnswer struct {
	Allowed      bool   `json:"allowed"`
	Remaining    int64  `json:"remaining"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	Limit        string `json:"limit"`
}
