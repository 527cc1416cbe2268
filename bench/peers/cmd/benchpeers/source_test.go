package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// gitRepo makes a repository with one commit of files (path → content).
func gitRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	write(t, dir, files)
	for _, args := range [][]string{
		{"init", "-q"},
		{"add", "."},
		{"-c", "user.name=bench", "-c", "user.email=bench@example.com", "commit", "-q", "-m", "one"},
	} {
		if _, err := runCmd(context.Background(), dir, nil, "git", args...); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		p = filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestChangedSince: only the files a build of the listed packages reads
// count: not tests, not sub-packages, not other packages.
func TestChangedSince(t *testing.T) {
	ctx := context.Background()
	dir := gitRepo(t, map[string]string{
		"client/client.go": "a", "client/client_test.go": "a", "client/sub/x.go": "a",
		"gcra/gcra.go": "a", "gcra/gcra_one.lua": "a", "regional/decide.go": "a",
	})
	pkgs := []string{"client", "gcra"}
	got, err := changedSince(ctx, dir, "HEAD", pkgs)
	if err != nil || len(got) != 0 {
		t.Fatalf("changedSince(clean) = %q, %v; want nothing", got, err)
	}
	write(t, dir, map[string]string{"client/client_test.go": "b", "client/sub/x.go": "b", "regional/decide.go": "b"})
	if got, err := changedSince(ctx, dir, "HEAD", pkgs); err != nil || len(got) != 0 {
		t.Errorf("changedSince(tests, sub-package, other package changed) = %q, %v; want nothing", got, err)
	}
	write(t, dir, map[string]string{"gcra/gcra_one.lua": "b", "client/new.go": "b"})
	want := []string{"client/new.go", "gcra/gcra_one.lua"}
	if got, err := changedSince(ctx, dir, "HEAD", pkgs); err != nil || !slices.Equal(got, want) {
		t.Errorf("changedSince(embedded file changed, new file) = %q, %v; want %q", got, err, want)
	}
	if _, err := changedSince(ctx, dir, "no-such-rev", pkgs); err == nil {
		t.Error("changedSince(no-such-rev) = nil error, want an error")
	}
}

func TestRepoPackages(t *testing.T) {
	repo := filepath.FromSlash("/src/allot")
	golist := strings.Join([]string{
		"google.golang.org/grpc /root/go/pkg/mod/google.golang.org/grpc@v1.85.0",
		"github.com/allot-dev/allot " + filepath.Join(repo, "proto", "allot", "v1"),
		"github.com/allot-dev/allot " + filepath.Join(repo, "client"),
		"go: downloading something",
		"github.com/allot-dev/allot/bench/peers " + filepath.Join(repo, "bench", "peers", "cmd", "benchpeers"),
	}, "\n")
	own, allot, err := repoPackages(repo, golist)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"bench/peers/cmd/benchpeers"}; !slices.Equal(own, want) {
		t.Errorf("repoPackages own = %q, want %q", own, want)
	}
	if want := []string{"client", "proto/allot/v1"}; !slices.Equal(allot, want) {
		t.Errorf("repoPackages allot = %q, want %q", allot, want)
	}
	if _, _, err := repoPackages(repo, "github.com/allot-dev/allot /elsewhere/client\n"); err == nil {
		t.Error("repoPackages(package outside --repo) = nil error, want an error")
	}
	if _, _, err := repoPackages(repo, "google.golang.org/grpc /x\n"); err == nil {
		t.Error("repoPackages(no allot package) = nil error, want an error")
	}
}
