package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runCLI runs allot with args and returns stdout, stderr and the exit code.
func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, &out, &errb)
	code := exitCode(err, &errb)
	return out.String(), errb.String(), code
}

func TestExitCodes(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("version: 1\nregions: [a]\nbogus: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		args   []string
		env    map[string]string
		code   int
		stdout string
		stderr string
	}{
		{"help", []string{"--help"}, nil, 0, "Usage:", ""},
		{"version", []string{"version"}, nil, 0, "allot ", ""},
		{"version json from env", []string{"version"}, map[string]string{"ALLOT_OUTPUT": "json"}, 0, `"version"`, ""},
		{"bad env value", []string{"version"}, map[string]string{"ALLOT_OUTPUT": "xml"}, 2, "", "want text or json"},
		{"unknown command", []string{"bogus"}, nil, 2, "", "unknown command"},
		{"unknown flag", []string{"version", "--bogus"}, nil, 2, "", "unknown flag"},
		{"extra argument", []string{"version", "x"}, nil, 2, "", "--help"},
		{"validate example", []string{"validate", "-f", "../../deploy/policy.example.yaml"}, nil, 0, "valid", ""},
		{"validate bad file", []string{"validate", "-f", bad}, nil, 1, "", "line 3: bogus"},
		{"validate missing file", []string{"validate", "-f", "/nonexistent.yaml"}, nil, 1, "", "no such file"},
		{"validate without -f", []string{"validate"}, nil, 2, "", "-f FILE is required"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			out, errs, code := runCLI(t, c.args...)
			if code != c.code || !strings.Contains(out, c.stdout) || !strings.Contains(errs, c.stderr) {
				t.Errorf("allot %v = exit %d, stdout %q, stderr %q; want exit %d, stdout containing %q, stderr containing %q",
					c.args, code, out, errs, c.code, c.stdout, c.stderr)
			}
		})
	}
}

// Every command answers --help with examples.
func TestHelpHasExamples(t *testing.T) {
	root := newRoot(&streams{out: &bytes.Buffer{}, err: &bytes.Buffer{}})
	for _, c := range root.Commands() {
		if c.Name() == "help" {
			continue
		}
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("allot %s has no examples in --help", c.Name())
		}
	}
}

func TestVersionJSON(t *testing.T) {
	out, _, code := runCLI(t, "version", "-o", "json")
	var v versionInfo
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.Version == "" || v.Go == "" {
		t.Errorf("allot version -o json = %q (exit %d), want a JSON object with version and go", out, code)
	}
}

func TestProbe(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ready\n") }))
	defer ok.Close()
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "not ready", http.StatusServiceUnavailable)
	}))
	defer bad.Close()
	if _, errs, code := runCLI(t, "probe", ok.URL); code != 0 {
		t.Errorf("probe of a 200 = exit %d (%s), want 0", code, errs)
	}
	if _, errs, code := runCLI(t, "probe", bad.URL); code != 1 || !strings.Contains(errs, "503") {
		t.Errorf("probe of a 503 = exit %d (%s), want 1 naming 503", code, errs)
	}
	if _, _, code := runCLI(t, "probe", "http://127.0.0.1:1/readyz", "--timeout", "500ms"); code != 1 {
		t.Errorf("probe of nothing = exit %d, want 1", code)
	}
}
