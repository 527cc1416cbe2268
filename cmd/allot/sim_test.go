package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSimJSON(t *testing.T) {
	out, errs, code := runCLI(t, "sim", "--scenario", "skew-shift", "--format", "json", "--seed", "2")
	if code != 0 {
		t.Fatalf("allot sim --scenario skew-shift --format json = exit %d, stderr %q", code, errs)
	}
	if !strings.Contains(errs, "skew-shift") {
		t.Errorf("stderr %q: want progress naming the scenario", errs)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("stdout is not a JSON array: %v\n%s", err, out)
	}
	modes := map[string]bool{}
	for _, r := range rows {
		for _, f := range []string{"scenario", "mode", "admitted", "ideal", "over_admission", "utilisation", "convergence_s", "writes", "over_admission_pct", "region_error_pct", "seed"} {
			if _, ok := r[f]; !ok {
				t.Errorf("row %v: no field %q", r["mode"], f)
			}
		}
		if r["scenario"] != "skew-shift" || r["seed"] != 2.0 {
			t.Errorf("row scenario %v seed %v, want skew-shift seed 2", r["scenario"], r["seed"])
		}
		if adm, ideal := r["admitted"].(float64), r["ideal"].(float64); adm <= 0 || ideal <= 0 {
			t.Errorf("row %v: admitted %v, ideal %v: want positive", r["mode"], adm, ideal)
		}
		modes[r["mode"].(string)] = true
	}
	if len(rows) != 3 || !modes["rebalanced"] || !modes["static"] || !modes["full"] {
		t.Errorf("rows for modes %v, want rebalanced, static and full", modes)
	}
}

func TestSimUsage(t *testing.T) {
	cases := []struct {
		args   []string
		stderr string
	}{
		{[]string{"sim", "--scenario", "nope"}, "skew-shift"},
		{[]string{"sim", "--format", "xml"}, "want table or json"},
		{[]string{"sim", "--seeds", "0"}, "at least 1"},
		{[]string{"sim", "--network", "lan"}, "--network"},
		{[]string{"sim", "extra"}, "--help"},
		{[]string{"sim", "--lease", "-1s"}, "--lease"},
		{[]string{"sim", "--scenario", "partition", "--lease", "3s"}, "at least two intervals"},
	}
	for _, c := range cases {
		out, errs, code := runCLI(t, c.args...)
		if code != 2 || out != "" || !strings.Contains(errs, c.stderr) {
			t.Errorf("allot %v = exit %d, stdout %q, stderr %q; want exit 2, stderr containing %q", c.args, code, out, errs, c.stderr)
		}
	}
}

func TestSimTableAndOut(t *testing.T) {
	dir := t.TempDir()
	out, errs, code := runCLI(t, "sim", "--scenario", "pinned", "--seeds", "2", "--out", dir)
	if code != 0 {
		t.Fatalf("allot sim --scenario pinned --seeds 2 --out = exit %d, stderr %q", code, errs)
	}
	for _, want := range []string{"SCENARIO", "pinned", "rebalanced", "mean / worst"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	for name, magic := range map[string][]byte{"pinned.png": []byte("\x89PNG"), "pinned.svg": []byte("<svg"), "results.md": []byte("| SCENARIO |")} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("--out: %v", err)
			continue
		}
		if !bytes.Contains(b[:min(len(b), 4096)], magic) {
			t.Errorf("%s does not contain %q near its start", name, magic)
		}
	}
	_, _, code = runCLI(t, "sim", "--help")
	if code != 0 {
		t.Errorf("allot sim --help = exit %d", code)
	}
}

// --compare shows each measure beside its value in an earlier run's JSON
// (here: the same scenario on the pessimistic network), and a file that is
// not such JSON is a usage error naming the flag.
func TestSimCompare(t *testing.T) {
	before, errs, code := runCLI(t, "sim", "--scenario", "skew-shift", "--network", "slow", "--format", "json")
	if code != 0 {
		t.Fatalf("allot sim --network slow --format json = exit %d, stderr %q", code, errs)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "before.json")
	if err := os.WriteFile(path, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errs, code := runCLI(t, "sim", "--scenario", "skew-shift", "--compare", path)
	if code != 0 {
		t.Fatalf("allot sim --compare = exit %d, stderr %q", code, errs)
	}
	if n := strings.Count(out, "(was "); n < 3*3 {
		t.Errorf("table has %d values beside a baseline's, want 3 per row (utilisation, shift loss, time to 90%%):\n%s", n, out)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errs, code := runCLI(t, "sim", "--scenario", "skew-shift", "--compare", bad); code != 2 || !strings.Contains(errs, "--compare") {
		t.Errorf("--compare of a file that is not JSON: exit %d, stderr %q; want 2 naming --compare", code, errs)
	}
}
