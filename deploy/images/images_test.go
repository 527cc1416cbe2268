package images

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestLddLine(t *testing.T) {
	for _, tc := range []struct {
		line string
		want string // "" for no file
	}{
		{"\tlinux-vdso.so.1 (0x00007fb9b4f44000)", ""},
		{"\tlibatomic.so.1 => /lib/x86_64-linux-gnu/libatomic.so.1 (0x00007fb9b4f29000)", "/lib/x86_64-linux-gnu/libatomic.so.1"},
		{"\t/lib64/ld-linux-x86-64.so.2 (0x00007fb9b4f46000)", "/lib64/ld-linux-x86-64.so.2"},
		{"\tlibfoo.so.1 => not found", ""},
		{"\tstatically linked", ""},
	} {
		m := lddLine.FindStringSubmatch(tc.line)
		got := ""
		if m != nil {
			got = m[1]
		}
		if got != tc.want {
			t.Errorf("lddLine(%q) = %q, want %q", tc.line, got, tc.want)
		}
	}
}

// The build context is deterministic (sorted, fixed times, root-owned) and
// carries parent directories before files, symlinks followed.
func TestWriteTar(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.WriteFile(real, []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"rootfs/usr/bin/redis-server": link, "Dockerfile": real}
	var a, b bytes.Buffer
	if err := writeTar(&a, files); err != nil {
		t.Fatal(err)
	}
	if err := writeTar(&b, files); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("writeTar is not deterministic")
	}
	tr := tar.NewReader(&a)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Name == "rootfs/usr/bin/redis-server" {
			data, _ := io.ReadAll(tr)
			if h.Typeflag != tar.TypeReg || string(data) != "binary" || h.Mode != 0o755 || h.Uid != 0 {
				t.Errorf("%s: type %c mode %o uid %d data %q; want a regular 0755 root file with the target's bytes", h.Name, h.Typeflag, h.Mode, h.Uid, data)
			}
		}
	}
	want := []string{"rootfs/", "rootfs/usr/", "rootfs/usr/bin/", "Dockerfile", "rootfs/usr/bin/redis-server"}
	if len(names) != len(want) {
		t.Fatalf("entries %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("entries %v, want %v", names, want)
		}
	}
}

func TestHasher(t *testing.T) {
	h := func(parts ...string) string {
		x := newHasher()
		for i := 0; i+1 < len(parts); i += 2 {
			x.add(parts[i], []byte(parts[i+1]))
		}
		return x.sum()
	}
	ab := []string{"a", "1", "b", "2"}
	if h(ab...) != h("a", "1", "b", "2") {
		t.Error("same parts, different hashes")
	}
	for _, other := range [][]string{{"a", "1", "b", "3"}, {"a", "12", "b", ""}, {"b", "2", "a", "1"}, {"a", "1"}} {
		if h("a", "1", "b", "2") == h(other...) {
			t.Errorf("parts %v hash like a,1,b,2", other)
		}
	}
	if got := len(h("a", "1")); got != 12 {
		t.Errorf("tag length %d, want 12", got)
	}
}

// From a nested module (e2e, deploy/images) the root is the nearest
// directory above whose go.mod is allot's, not the nested module's own.
func TestRootAbove(t *testing.T) {
	root := t.TempDir()
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "// allot\nmodule github.com/allot-dev/allot // the root\n\ngo 1.26.0\n")
	write("e2e/go.mod", "module github.com/allot-dev/allot/e2e\n\ngo 1.26.0\n")
	write("deploy/images/go.mod", "module \"github.com/allot-dev/allot/deploy/images\"\n")
	write("deploy/images/build/x.go", "package main\n")
	for _, dir := range []string{"", "e2e", "deploy/images", "deploy/images/build"} {
		got, err := rootAbove(filepath.Join(root, dir))
		if err != nil || got != root {
			t.Errorf("rootAbove(%q) = %q, %v; want %q", dir, got, err, root)
		}
	}
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "go.mod"), []byte("module example.com/allot\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := rootAbove(other); err == nil {
		t.Errorf("rootAbove(a module that is not allot's) = %q, want an error", got)
	}
}
