package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// allotModule is the main module's path.
const allotModule = "github.com/allot-dev/allot"

// harnessSource is what this harness was compiled from. `go run` builds it
// from the work tree (bench/peers replaces allot's module with ../..), so
// the allot packages it links — the Go client, the generated gRPC code, the
// GCRA script the physical limit loads — are the work tree's, whatever
// --allot-rev builds allot regional from.
type harnessSource struct {
	// rev is HEAD, 12 hex digits; err says why it is unknown.
	rev string
	err error
	// ownPkgs and allotPkgs are the package directories linked into the
	// harness, relative to the repository root: its own (bench/peers) and
	// allot's (client, gcra, proto/allot/v1...).
	ownPkgs, allotPkgs []string
	// dirty lists files of those packages with uncommitted changes.
	dirty []string
}

// String names the revision and whether it is dirty, for the report.
func (s harnessSource) String() string {
	switch {
	case s.err != nil:
		return "unknown (" + firstLine(s.err.Error()) + ")"
	case len(s.dirty) > 0:
		return s.rev + " + uncommitted changes in " + strings.Join(s.dirty, ", ")
	}
	return s.rev + " (clean: no uncommitted change in the " + pluralPkgs(len(s.ownPkgs)+len(s.allotPkgs)) + " it links from the repository)"
}

func pluralPkgs(n int) string {
	if n == 1 {
		return "1 package"
	}
	return fmt.Sprintf("%d packages", n)
}

// checkSource finds what this harness was compiled from and, with
// --allot-rev, that the allot packages it links are the same at that
// revision as in the work tree: the client-side drivers must run the code
// allot regional is built from. It fails the run at once when they differ.
func (h *harness) checkSource(ctx context.Context) error {
	h.src = describeSource(ctx, h.cfg.repo)
	h.progress("harness built from %s", h.src)
	if h.cfg.allotRev == "" {
		return nil
	}
	if h.src.err != nil {
		return fmt.Errorf("--allot-rev %s: cannot check that the harness links allot's code of that revision: %w", h.cfg.allotRev, h.src.err)
	}
	files, err := changedSince(ctx, h.cfg.repo, h.cfg.allotRev, h.src.allotPkgs)
	if err != nil {
		return fmt.Errorf("--allot-rev %s: %w", h.cfg.allotRev, err)
	}
	if len(files) > 0 {
		return fmt.Errorf("--allot-rev %s: the harness links allot's packages %s from the work tree, which differs from %s in %s; "+
			"the client-side drivers would not run the code allot regional is built from. Commit those files, or run without --allot-rev (the work tree for both)",
			h.cfg.allotRev, strings.Join(h.src.allotPkgs, ", "), h.cfg.allotRev, strings.Join(files, ", "))
	}
	return nil
}

// changedSince lists the files of the package directories pkgs (relative
// to repo; test files left out) that differ between revision rev and the
// work tree, untracked files included.
func changedSince(ctx context.Context, repo, rev string, pkgs []string) ([]string, error) {
	specs := pkgPathspecs(pkgs)
	diff, err := runCmd(ctx, repo, nil, "git", append([]string{"diff", "--name-only", rev, "--"}, specs...)...)
	if err != nil {
		return nil, err
	}
	untracked, err := runCmd(ctx, repo, nil, "git", append([]string{"ls-files", "--others", "--exclude-standard", "--"}, specs...)...)
	if err != nil {
		return nil, err
	}
	files := splitLines(diff + "\n" + untracked)
	slices.Sort(files)
	return slices.Compact(files), nil
}

// describeSource lists the repository's packages linked into this harness
// (go list -deps, from bench/peers, as go run built it moments ago) and
// which of their files have uncommitted changes.
func describeSource(ctx context.Context, repo string) harnessSource {
	var s harnessSource
	out, err := runCmd(ctx, repo, nil, "git", "rev-parse", "--short=12", "HEAD")
	if err != nil {
		s.err = fmt.Errorf("git rev-parse HEAD: %w", err)
		return s
	}
	s.rev = strings.TrimSpace(out)
	out, err = runCmd(ctx, filepath.Join(repo, "bench", "peers"), nil, "go", "list", "-deps",
		"-f", "{{if .Module}}{{.Module.Path}} {{.Dir}}{{end}}", "./cmd/benchpeers")
	if err != nil {
		s.err = fmt.Errorf("go list -deps ./cmd/benchpeers: %w", err)
		return s
	}
	if s.ownPkgs, s.allotPkgs, err = repoPackages(repo, out); err != nil {
		s.err = err
		return s
	}
	specs := append(pkgPathspecs(append(slices.Clone(s.ownPkgs), s.allotPkgs...)), "bench/peers/go.mod", "bench/peers/go.sum")
	out, err = runCmd(ctx, repo, nil, "git", append([]string{"status", "--porcelain", "--untracked-files=all", "--"}, specs...)...)
	if err != nil {
		s.err = fmt.Errorf("git status: %w", err)
		return s
	}
	s.dirty = changedFiles(out)
	return s
}

// repoPackages reads go list lines "MODULE DIR" and returns the directories,
// relative to repo, of the bench/peers module's packages and of allot's.
func repoPackages(repo, golist string) (own, allot []string, err error) {
	for _, line := range splitLines(golist) {
		mod, dir, ok := strings.Cut(line, " ")
		if !ok || (mod != allotModule && mod != allotModule+"/bench/peers") {
			continue
		}
		rel, err := filepath.Rel(repo, dir)
		if err != nil || strings.HasPrefix(rel, "..") {
			return nil, nil, fmt.Errorf("go list: package directory %s is not under --repo %s", dir, repo)
		}
		rel = filepath.ToSlash(rel)
		if mod == allotModule {
			allot = append(allot, rel)
		} else {
			own = append(own, rel)
		}
	}
	if len(allot) == 0 {
		return nil, nil, fmt.Errorf("go list: no package of %s linked; is --repo the checkout this harness was built from?", allotModule)
	}
	slices.Sort(own)
	slices.Sort(allot)
	return own, allot, nil
}

// pkgPathspecs are git pathspecs for the files directly in each package
// directory (not its sub-packages), test files left out: what a build of
// the package reads (sources, embedded files), and a little more.
func pkgPathspecs(dirs []string) []string {
	specs := make([]string, 0, len(dirs)+1)
	for _, d := range dirs {
		specs = append(specs, ":(glob)"+d+"/*")
	}
	return append(specs, ":(glob,exclude)**/*_test.go")
}

func splitLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
