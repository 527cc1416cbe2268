package envoyconf_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/allot-dev/allot/policy/envoyconf"
)

// The original service's version whose fixtures these tests read (the one
// make bench-peers builds).
const (
	envoyModule  = "github.com/envoyproxy/ratelimit"
	envoyVersion = "v1.4.1-0.20260122083618-3fb702589d36"
)

var (
	moduleOnce sync.Once
	moduleDir  string
	moduleErr  error
)

// envoyDir returns the original service's module source, downloaded through
// the Go module proxy (the fixtures are read there, never copied here).
func envoyDir(t *testing.T) string {
	t.Helper()
	moduleOnce.Do(func() {
		cmd := exec.Command("go", "mod", "download", "-json", envoyModule+"@"+envoyVersion)
		cmd.Dir = t.TempDir()
		out, err := cmd.Output()
		if err != nil {
			moduleErr = err
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				moduleErr = errors.New(string(ee.Stderr) + string(out))
			}
			return
		}
		var m struct{ Dir, Error string }
		if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
			moduleErr = errors.New("go mod download: no Dir in " + string(out) + m.Error)
			return
		}
		moduleDir = m.Dir
	})
	if moduleErr != nil {
		t.Fatalf("the original service's module source (%s@%s) is needed and could not be downloaded: %v", envoyModule, envoyVersion, moduleErr)
	}
	return moduleDir
}

func parse(t *testing.T, path string) (*envoyconf.File, error) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return envoyconf.ParseFile(filepath.Base(path), data)
}

// Every fixture of the original's config tests loads here with the outcome
// its own tests expect, and every reject names the field the original's
// message is about. A fixture this table does not list fails the test.
func TestOriginalFixtures(t *testing.T) {
	dir := filepath.Join(envoyDir(t), "test", "config")
	cases := map[string]struct {
		field string // "" when accepted
		msg   string
	}{
		"basic_config.yaml":        {},
		"duplicate_domain.yaml":    {}, // alone; with basic_config below
		"merge_domain_key1.yaml":   {},
		"merge_domain_key2.yaml":   {},
		"shadowmode_config.yaml":   {},
		"share_threshold.yaml":     {},
		"wildcard.yaml":            {},
		"bad_limit_unit.yaml":      {"descriptors[0].rate_limit.unit", "invalid rate limit unit 'foo'"},
		"bad_yaml.yaml":            {"", "error loading config file"},
		"duplicate_key.yaml":       {"descriptors[1].key", "duplicate descriptor composite key 'test-domain.key1_value1'"},
		"empty_domain.yaml":        {"domain", "config file cannot have empty domain"},
		"empty_key.yaml":           {"descriptors[0].key", "descriptor has empty key"},
		"misspelled_key.yaml":      {"descriptors[0].ratelimit", "unknown key 'ratelimit'"},
		"misspelled_key2.yaml":     {"descriptors[0].rate_limit.requestsperunit", "unknown key 'requestsperunit'"},
		"non_map_list.yaml":        {"descriptors[0]", "list of type other than map: a"},
		"non_string_key.yaml":      {"", "key is not of type string: 0.25"},
		"replaces_empty.yaml":      {"descriptors[0].descriptors[0].rate_limit.replaces[0].name", "should not have an empty replaces entry"},
		"replaces_self.yaml":       {"descriptors[0].descriptors[0].rate_limit.replaces[0].name", "replaces should not contain name of same descriptor"},
		"unlimited_with_unit.yaml": {"descriptors[0].rate_limit.unit", "should not specify rate limit unit when unlimited"},
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures in %s: %v", dir, err)
	}
	for _, path := range files {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			want, ok := cases[name]
			if !ok {
				t.Fatalf("fixture %s is new: add its expected outcome to this table", name)
			}
			f, err := parse(t, path)
			if err == nil {
				_, err = envoyconf.Build([]*envoyconf.File{f}, false)
			}
			if want.msg == "" {
				if err != nil {
					t.Fatalf("rejected, the original accepts it: %v", err)
				}
				return
			}
			var fe *envoyconf.FieldError
			if !errors.As(err, &fe) || !errors.Is(err, envoyconf.ErrConfig) {
				t.Fatalf("accepted or not a FieldError (%v), the original rejects it: %s", err, want.msg)
			}
			if fe.File != name || fe.Field != want.field || !strings.Contains(fe.Msg, want.msg) {
				t.Fatalf("got %q (field %q), want field %q and %q", err, fe.Field, want.field, want.msg)
			}
			if want.field != "" && fe.Line == 0 {
				t.Fatalf("%v: no line", err)
			}
		})
	}
	for name := range cases {
		if !slices.Contains(files, filepath.Join(dir, name)) {
			t.Errorf("%s is gone from the original's fixtures: update this table", name)
		}
	}
}

// Domains across files: a domain twice is an error unless merged, and a
// merge still rejects a key in both.
func TestOriginalFixturesMerge(t *testing.T) {
	dir := filepath.Join(envoyDir(t), "test", "config")
	load := func(names ...string) []*envoyconf.File {
		var fs []*envoyconf.File
		for _, n := range names {
			f, err := parse(t, filepath.Join(dir, n))
			if err != nil {
				t.Fatal(err)
			}
			fs = append(fs, f)
		}
		return fs
	}
	if _, err := envoyconf.Build(load("basic_config.yaml", "duplicate_domain.yaml"), false); err == nil || !strings.Contains(err.Error(), "duplicate domain 'test-domain'") || !strings.HasPrefix(err.Error(), "duplicate_domain.yaml: domain: ") {
		t.Fatalf("duplicate domain: %v", err)
	}
	if _, err := envoyconf.Build(load("merge_domain_key1.yaml", "merge_domain_key2.yaml"), false); err == nil {
		t.Fatal("two files of one domain accepted without merge")
	}
	c, err := envoyconf.Build(load("merge_domain_key1.yaml", "merge_domain_key2.yaml"), true)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []envoyconf.Entry{{Key: "key1", Value: "value1"}, {Key: "key2", Value: "value2"}} {
		if _, ok := c.Match("test-domain", []envoyconf.Entry{e}); !ok {
			t.Errorf("merged config: no limit for %v", e)
		}
	}
	if _, err := envoyconf.Build(load("merge_domain_key1.yaml", "merge_domain_key1.yaml"), true); err == nil || !strings.Contains(err.Error(), "duplicate descriptor composite key 'test-domain.key1_value1'") {
		t.Fatalf("merge of one key twice: %v", err)
	}
}

// The original's example configs load.
func TestOriginalExamples(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(envoyDir(t), "examples", "ratelimit", "config", "*.yaml"))
	if len(files) == 0 {
		t.Fatal("no example configs in the original's module")
	}
	var fs []*envoyconf.File
	for _, path := range files {
		f, err := parse(t, path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		fs = append(fs, f)
	}
	c, err := envoyconf.Build(fs, false)
	if err != nil {
		t.Fatal(err)
	}
	if c.Limits() == 0 {
		t.Fatal("examples loaded with no limits")
	}
}
