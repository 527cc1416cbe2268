package envoydiff

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// reloadConfig is the reload scenario's configuration: remote_address at
// n per minute, and a probe at probe per hour that only checks (hits_addend
// 0) read, to see which configuration a service holds.
func reloadConfig(n, probe int) string {
	return fmt.Sprintf(`domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: %d}
  - key: probe
    rate_limit: {unit: hour, requests_per_unit: %d}
`, n, probe)
}

// testReload raises a limit whose counter is spent, by the original's
// reload with RUNTIME_WATCH_ROOT at its default (true): RUNTIME_ROOT is a
// symbolic link swapped to a new version of the tree. Then it edits the
// current version's file in place, which the original does not watch.
func testReload(t *testing.T) {
	const name = "config reload (RUNTIME_ROOT swapped)"
	base := t.TempDir()
	root := filepath.Join(base, "current")
	write := func(version, yaml string) {
		t.Helper()
		dir := filepath.Join(base, version, "ratelimit", "config")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, ".config.yaml.tmp")
		if err := os.WriteFile(tmp, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "config.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	swap := func(version string) {
		t.Helper()
		tmp := root + ".tmp"
		_ = os.Remove(tmp)
		if err := os.Symlink(version, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, root); err != nil {
			t.Fatal(err)
		}
	}
	write("v1", reloadConfig(3, 100))
	swap("v1")
	p := startPairAt(t, root)
	awayFromWindowEnd(t, nil)
	r := &row{scenario: name}
	start := time.Now()
	ra := req("edge", 0, desc("remote_address=1"))
	for range 3 {
		p.check(t, r, same(ra))
	}

	// 3 per minute becomes 5 per minute with all 3 spent.
	write("v2", reloadConfig(5, 200))
	swap("v2")
	p.envoy.waitProbe(t, 200)
	p.allot.waitProbe(t, 200)
	const why = "a limit raised by a reload (3 → 5 per minute, 3 spent): the original keeps the count (2 left), " +
		"allot keeps what is left (nothing: GCRA's state restated under the new limit mints no units)"
	p.check(t, r, known(ra, "OVER_LIMIT [OVER_LIMIT 5/MINUTE rem=0 reset]", "OK [OK 5/MINUTE rem=1 reset]", why))
	p.check(t, r, known(ra, "OVER_LIMIT [OVER_LIMIT 5/MINUTE rem=0 reset]", "OK [OK 5/MINUTE rem=0 reset]", why))
	p.check(t, r, same(ra))

	// An in-place edit of the current version: allot reloads it; the
	// original, watching only RUNTIME_ROOT's swaps, keeps 200.
	write("v2", reloadConfig(5, 300))
	p.allot.waitProbe(t, 300)
	p.check(t, r, known(req("edge", 0, desc("probe=1", hits(0))),
		"OK [OK 300/HOUR rem=0]", "OK [OK 200/HOUR rem=200 reset]",
		"an in-place edit of a file under RUNTIME_ROOT with RUNTIME_WATCH_ROOT=true (the default): the original reloads only when RUNTIME_ROOT itself is replaced, allot on any change it polls"))
	p.finish(t, r, start)
}

// waitProbe polls (a check: nothing counted) until s holds the reload
// configuration whose probe limit is probe per hour.
func (s *service) waitProbe(t *testing.T, probe uint32) {
	t.Helper()
	r := req("edge", 0, desc("probe=1", hits(0)))
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := s.ask(r)
		if err == nil && len(resp.GetStatuses()) == 1 && resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() == probe {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not load the configuration with probe %d/hour within 20s: last answer %s; its log:\n%s", s.name, probe, render(resp, err), s.tail(20))
		}
		<-tick.C
	}
}
