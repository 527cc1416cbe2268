package envoycompat

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/allot-dev/allot/internal/wait"
	"github.com/allot-dev/allot/policy/envoyconf"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func domainFile(domain string, rpu int) string {
	return "domain: " + domain + "\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: " + strconv.Itoa(rpu) + "}\n"
}

func TestRuntimeLayouts(t *testing.T) {
	root := t.TempDir()
	// The original's default layout: RUNTIME_ROOT is a symbolic link to
	// the current version; files under <root>/<sub>/config/ load, with
	// keys config.<name>; others under <root>/<sub> do not.
	v1 := filepath.Join(root, "v1")
	write(t, filepath.Join(v1, "rl", "config", "a.yaml"), domainFile("a", 1))
	write(t, filepath.Join(v1, "rl", "config", "nested", "b.yaml"), domainFile("b", 2))
	write(t, filepath.Join(v1, "rl", "other", "c.yaml"), domainFile("c", 3))
	write(t, filepath.Join(v1, "rl", "configx.yaml"), domainFile("x", 3))
	write(t, filepath.Join(v1, "rl", "config", ".hidden.yaml"), domainFile("h", 4))
	current := filepath.Join(root, "current")
	if err := os.Symlink(v1, current); err != nil {
		t.Fatal(err)
	}
	r := Runtime{Root: current, Subdirectory: "rl", AppDirectory: "config", WatchRoot: true}
	files, _, err := r.read()
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, f := range files {
		keys = append(keys, f.key)
	}
	if got := strings.Join(keys, " "); got != "config..hidden.yaml config.a.yaml config.nested.b.yaml" {
		t.Errorf("watch root keys = %s", got)
	}
	r.IgnoreDotFiles = true
	cfg, _, err := r.Load()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Domains(), ","); got != "a,b" {
		t.Errorf("domains = %s, want a,b", got)
	}
	// Without WatchRoot: everything under <root>/<sub>/<app>.
	r = Runtime{Root: current, Subdirectory: "rl", AppDirectory: "other", WatchRoot: false}
	if cfg, _, err = r.Load(); err != nil || strings.Join(cfg.Domains(), ",") != "c" {
		t.Errorf("no watch root: %v, %v", cfg, err)
	}
}

// TestRuntimeConfigMap reads a Kubernetes ConfigMap volume as Envoy Gateway
// and Istio mount it: the files are links into ..data, itself a link to a
// timestamped directory; without RUNTIME_IGNOREDOTFILES each domain would
// be read twice.
func TestRuntimeConfigMap(t *testing.T) {
	data := t.TempDir()
	dir := filepath.Join(data, "ratelimit", "config")
	ts := filepath.Join(dir, "..2026_12_02_10_00_00.1")
	write(t, filepath.Join(ts, "config.yaml"), domainFile("edge", 5))
	if err := os.Symlink("..2026_12_02_10_00_00.1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/config.yaml", filepath.Join(dir, "config.yaml")); err != nil {
		t.Fatal(err)
	}
	r := Runtime{Root: data, Subdirectory: "ratelimit", AppDirectory: "config", IgnoreDotFiles: true}
	cfg, _, err := r.Load()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Files(), ","); got != "config.yaml" {
		t.Errorf("files = %s, want config.yaml once", got)
	}
	r.IgnoreDotFiles = false
	if _, _, err := r.Load(); !errors.Is(err, envoyconf.ErrConfig) || !strings.Contains(err.Error(), "duplicate domain") {
		t.Errorf("without ignoring dot files: %v, want the duplicate domain the original reports too", err)
	}
}

func TestRuntimeErrors(t *testing.T) {
	r := Runtime{Root: filepath.Join(t.TempDir(), "missing"), AppDirectory: "config", WatchRoot: true}
	if _, _, err := r.Load(); err == nil || !strings.Contains(err.Error(), "RUNTIME_ROOT") {
		t.Errorf("missing root: %v, want an error naming RUNTIME_ROOT", err)
	}
	root := t.TempDir()
	write(t, filepath.Join(root, "config", "bad.yaml"), "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	r = Runtime{Root: root, AppDirectory: "config", WatchRoot: true}
	_, _, err := r.Load()
	var fe *envoyconf.FieldError
	if !errors.As(err, &fe) || fe.File != "config.bad.yaml" || !strings.Contains(fe.Field, "unit") {
		t.Errorf("bad unit: %v, want a field error naming config.bad.yaml and the unit", err)
	}
}

// applied records what Watch applies.
type applied struct {
	mu    sync.Mutex
	cfgs  []*envoyconf.Config
	loads []bool
}

func (a *applied) apply(c *envoyconf.Config) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cfgs = append(a.cfgs, c)
	return nil
}

func (a *applied) onLoad(ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.loads = append(a.loads, ok)
}

func (a *applied) state() (int, *envoyconf.Config, []bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var last *envoyconf.Config
	if len(a.cfgs) > 0 {
		last = a.cfgs[len(a.cfgs)-1]
	}
	return len(a.cfgs), last, append([]bool(nil), a.loads...)
}

func TestRuntimeWatch(t *testing.T) {
	root := t.TempDir()
	path := filepath.Join(root, "config", "rl.yaml")
	write(t, path, domainFile("edge", 5))
	r := Runtime{Root: root, AppDirectory: "config", WatchRoot: true}
	var a applied
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		done <- r.Watch(ctx, 10*time.Millisecond, slog.New(slog.DiscardHandler), a.apply, a.onLoad, first)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	limitOf := func(c *envoyconf.Config) uint32 {
		m, ok := c.Match("edge", []envoyconf.Entry{{Key: "k", Value: "v"}})
		if !ok {
			return 0
		}
		return m.Limit.RequestsPerUnit
	}
	if n, c, _ := a.state(); n != 1 || limitOf(c) != 5 {
		t.Fatalf("first load: %d applied, limit %d", n, limitOf(c))
	}
	// A change is applied.
	write(t, path, domainFile("edge", 7))
	wait.Until(t, 5*time.Second, func() error {
		if _, c, _ := a.state(); limitOf(c) != 7 {
			return errors.New("change not applied")
		}
		return nil
	})
	// A broken file is rejected and counted; the last good one stays.
	write(t, path, "domain: edge\ndescriptors: [{key: k, rate_limit: {unit: minute}}]\nbogus: 1\n")
	wait.Until(t, 5*time.Second, func() error {
		if _, _, loads := a.state(); len(loads) < 3 || loads[2] {
			return errors.New("broken file not rejected yet")
		}
		return nil
	})
	if n, c, _ := a.state(); n != 2 || limitOf(c) != 7 {
		t.Errorf("after a broken file: %d applied, limit %d; want the good one kept", n, limitOf(c))
	}
	// Fixed again: applied.
	write(t, path, domainFile("edge", 9))
	wait.Until(t, 5*time.Second, func() error {
		if _, c, _ := a.state(); limitOf(c) != 9 {
			return errors.New("fix not applied")
		}
		return nil
	})
	// A file outside config/ changes nothing that is loaded.
	files, _, err := r.read()
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(root, "unrelated.yaml"), domainFile("other", 1))
	again, _, err := r.read()
	if err != nil || fingerprint(files) != fingerprint(again) {
		t.Errorf("a file outside config/ changed the fingerprint (%v)", err)
	}
}

// TestRuntimeUnreadable leaves out what it may not read (a volume's
// lost+found, another user's file), as the original does, instead of
// refusing the whole configuration. (As root every file is readable: the
// test makes entries unreadable by being dangling or special instead.)
func TestRuntimeUnreadable(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "config", "good.yaml"), domainFile("good", 1))
	lost := filepath.Join(root, "config", "lost+found")
	if err := os.MkdirAll(lost, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(lost, "x.yaml"), domainFile("lost", 1))
	if err := os.Chmod(lost, 0o000); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(lost, 0o755) })
	r := Runtime{Root: root, AppDirectory: "config", WatchRoot: true}
	cfg, skipped, err := r.Load()
	if os.Geteuid() == 0 {
		// root reads a mode-000 directory: nothing is left out.
		if err != nil || len(cfg.Domains()) != 2 {
			t.Fatalf("as root: %v, %v", cfg, err)
		}
		return
	}
	if err != nil || strings.Join(cfg.Domains(), ",") != "good" || len(skipped) != 1 || !strings.Contains(skipped[0], "lost+found") {
		t.Errorf("Load = %v, skipped %v, %v; want good loaded and lost+found left out", cfg, skipped, err)
	}
}
