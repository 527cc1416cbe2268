package images

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/client"
)

// The image names. Each is tagged with its content hash and with DevTag.
const (
	Allot = "allot"
	Etcd  = "allot-etcd"
	Redis = "allot-redis"
	// DevTag is the moving tag every build also applies (allot:dev), for
	// compose files and people.
	DevTag = "dev"
	// Label marks every image built here; its value is the image name.
	Label = "dev.allot.image"
)

// recipe is bumped when the way images are assembled changes, so that every
// content hash changes with it.
const recipe = "images/v1"

// ErrBuild is wrapped by every failed build.
var ErrBuild = errors.New("image build failed")

// Config says where the repository is and how to talk.
type Config struct {
	// Root is the directory of allot's go.mod (default: the module of the
	// working directory, `go env GOMOD`, or from a nested module such as
	// e2e the nearest directory above it whose go.mod is allot's).
	Root string
	// Go is the go command (default: "go" on PATH, else $GOROOT/bin/go).
	Go string
	// RedisServer is the Redis binary to package (default
	// /usr/bin/redis-server, symlinks resolved).
	RedisServer string
	// Log receives progress lines (default: discard).
	Log io.Writer
	// Force rebuilds even when the tag for the current content exists.
	Force bool
	// Docker is the engine client (default: from the environment, with
	// API version negotiation).
	Docker *client.Client
}

// Set is the image references of one content state.
type Set struct {
	Allot, Etcd, Redis string
}

// Ensure makes sure the three images for the current content exist, building
// those whose tag is missing, and moves each :dev tag to them. It removes
// older content tags of the same images.
func Ensure(ctx context.Context, cfg Config) (Set, error) {
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.Go == "" {
		cfg.Go = goCommand()
	}
	if cfg.RedisServer == "" {
		cfg.RedisServer = "/usr/bin/redis-server"
	}
	if cfg.Root == "" {
		root, err := moduleRoot(ctx, cfg.Go)
		if err != nil {
			return Set{}, err
		}
		cfg.Root = root
	}
	if cfg.Docker == nil {
		dc, err := client.New(client.FromEnv)
		if err != nil {
			return Set{}, fmt.Errorf("docker client: %w", err)
		}
		defer dc.Close()
		cfg.Docker = dc
	}
	if _, err := cfg.Docker.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		return Set{}, fmt.Errorf("docker engine: %w", err)
	}
	b := &builder{cfg: cfg}
	var set Set
	var err error
	if set.Redis, err = b.ensure(ctx, Redis, b.redisHash, b.redisContext); err != nil {
		return Set{}, err
	}
	if set.Etcd, err = b.ensure(ctx, Etcd, b.etcdHash, b.etcdContext); err != nil {
		return Set{}, err
	}
	if set.Allot, err = b.ensure(ctx, Allot, b.allotHash, b.allotContext); err != nil {
		return Set{}, err
	}
	return set, nil
}

type builder struct {
	cfg Config
	// redis files, found once: path in the image -> path on the host.
	redisFiles map[string]string
}

func (b *builder) logf(format string, args ...any) {
	fmt.Fprintf(b.cfg.Log, "images: "+format+"\n", args...)
}

// ensure builds name:hash unless it exists, then tags it :dev and prunes
// other hashes of name.
func (b *builder) ensure(ctx context.Context, name string, hash func(context.Context) (string, error),
	contents func(ctx context.Context, dir string) (map[string]string, error)) (string, error) {
	start := time.Now()
	h, err := hash(ctx)
	if err != nil {
		return "", fmt.Errorf("%s: content hash: %w", name, err)
	}
	ref := name + ":" + h
	exists, err := b.exists(ctx, ref)
	if err != nil {
		return "", err
	}
	if exists && !b.cfg.Force {
		b.logf("%s up to date (%v)", ref, time.Since(start).Round(time.Millisecond))
	} else {
		dir, err := os.MkdirTemp("", "allot-image-")
		if err != nil {
			return "", err
		}
		defer os.RemoveAll(dir)
		files, err := contents(ctx, dir)
		if err != nil {
			return "", fmt.Errorf("%s: %w: %w", name, ErrBuild, err)
		}
		if err := b.build(ctx, ref, name, files); err != nil {
			return "", fmt.Errorf("%s: %w: %w", name, ErrBuild, err)
		}
		b.logf("%s built (%v)", ref, time.Since(start).Round(time.Millisecond))
	}
	if _, err := b.cfg.Docker.ImageTag(ctx, client.ImageTagOptions{Source: ref, Target: name + ":" + DevTag}); err != nil {
		return "", fmt.Errorf("tag %s:%s: %w", name, DevTag, err)
	}
	b.prune(ctx, name, h)
	return ref, nil
}

func (b *builder) exists(ctx context.Context, ref string) (bool, error) {
	_, err := b.cfg.Docker.ImageInspect(ctx, ref)
	switch {
	case err == nil:
		return true, nil
	case cerrdefs.IsNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("inspect %s: %w", ref, err)
}

// prune removes name's images labelled by us whose tag is another hash.
func (b *builder) prune(ctx context.Context, name, keep string) {
	res, err := b.cfg.Docker.ImageList(ctx, client.ImageListOptions{Filters: make(client.Filters).Add("label", Label+"="+name)})
	if err != nil {
		return
	}
	for _, im := range res.Items {
		for _, t := range im.RepoTags {
			if t == name+":"+keep || t == name+":"+DevTag || !strings.HasPrefix(t, name+":") {
				continue
			}
			if _, err := b.cfg.Docker.ImageRemove(ctx, t, client.ImageRemoveOptions{PruneChildren: true}); err == nil {
				b.logf("removed stale %s", t)
			}
		}
	}
}

// build sends files (name in the context -> path on disk) as the context of
// a classic-builder build tagged ref.
func (b *builder) build(ctx context.Context, ref, name string, files map[string]string) error {
	var buf bytes.Buffer
	if err := writeTar(&buf, files); err != nil {
		return err
	}
	res, err := b.cfg.Docker.ImageBuild(ctx, &buf, client.ImageBuildOptions{
		Tags:        []string{ref},
		Remove:      true,
		ForceRemove: true,
		Dockerfile:  "Dockerfile",
		Labels:      map[string]string{Label: name},
		Version:     build.BuilderV1,
	})
	if err != nil {
		return err
	}
	defer res.Body.Close()
	// The answer is a stream of JSON messages; a failure is one with an
	// error field.
	dec := json.NewDecoder(res.Body)
	var tail []string
	for {
		var m struct {
			Stream      string `json:"stream"`
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("read build output: %w", err)
		}
		if m.Stream != "" {
			tail = append(tail, strings.TrimSpace(m.Stream))
			if len(tail) > 20 {
				tail = tail[1:]
			}
		}
		if m.Error != "" {
			return fmt.Errorf("%s (last output: %s)", m.Error, strings.Join(tail, " | "))
		}
	}
	ok, err := b.exists(ctx, ref)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("the engine reported no error but %s does not exist (output: %s)", ref, strings.Join(tail, " | "))
	}
	return nil
}

// writeTar writes files sorted by name, each a regular file (symlinks
// followed) with its mode kept, owned by root, at a fixed time.
func writeTar(w io.Writer, files map[string]string) error {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	tw := tar.NewWriter(w)
	dirs := map[string]bool{}
	mtime := time.Unix(0, 0)
	for _, n := range names {
		// Parent directories first, so the builder keeps their modes.
		for d := filepath.Dir(n); d != "." && d != "/" && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	ds := make([]string, 0, len(dirs))
	for d := range dirs {
		ds = append(ds, d)
	}
	sort.Strings(ds)
	for _, d := range ds {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: mtime}); err != nil {
			return err
		}
	}
	for _, n := range names {
		data, err := os.ReadFile(files[n])
		if err != nil {
			return err
		}
		fi, err := os.Stat(files[n])
		if err != nil {
			return err
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: int64(fi.Mode().Perm()), Size: int64(len(data)), ModTime: mtime}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// hashOf hashes labelled parts in order.
type hasher struct{ h []byte }

func newHasher() *hasher { return &hasher{} }

func (h *hasher) add(label string, data []byte) {
	s := sha256.New()
	s.Write(h.h)
	fmt.Fprintf(s, "%s\x00%d\x00", label, len(data))
	s.Write(data)
	h.h = s.Sum(nil)
}

func (h *hasher) addFile(label, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	h.add(label, data)
	return nil
}

func (h *hasher) sum() string { return hex.EncodeToString(h.h)[:12] }

// ---- allot ----

// allotHash hashes every file the main module's packages under ./cmd/allot
// compile or embed, go.mod, go.sum, the Go version and the Dockerfile.
func (b *builder) allotHash(ctx context.Context) (string, error) {
	h := newHasher()
	h.add("recipe", []byte(recipe))
	ver, err := b.goOut(ctx, b.cfg.Root, nil, "env", "GOVERSION")
	if err != nil {
		return "", err
	}
	h.add("go", []byte(ver))
	for _, f := range []string{"go.mod", "go.sum", "deploy/Dockerfile"} {
		if err := h.addFile(f, filepath.Join(b.cfg.Root, f)); err != nil {
			return "", err
		}
	}
	out, err := b.goOut(ctx, b.cfg.Root, nil, "list", "-deps",
		"-f", `{{if .Module}}{{if .Module.Main}}{{.Dir}}{{range .GoFiles}} {{.}}{{end}}{{range .CgoFiles}} {{.}}{{end}}{{range .EmbedFiles}} {{.}}{{end}}{{end}}{{end}}`,
		"./cmd/allot")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		dir := f[0]
		rel, err := filepath.Rel(b.cfg.Root, dir)
		if err != nil {
			return "", err
		}
		for _, name := range f[1:] {
			if err := h.addFile(filepath.ToSlash(filepath.Join(rel, name)), filepath.Join(dir, name)); err != nil {
				return "", err
			}
		}
	}
	return h.sum(), nil
}

func (b *builder) allotContext(ctx context.Context, dir string) (map[string]string, error) {
	bin := filepath.Join(dir, "allot")
	b.logf("allot: go build ./cmd/allot (static)")
	if _, err := b.goOut(ctx, b.cfg.Root, []string{"CGO_ENABLED=0"}, "build", "-trimpath", "-buildvcs=false",
		"-ldflags", "-s -w -X main.version=e2e", "-o", bin, "./cmd/allot"); err != nil {
		return nil, err
	}
	return map[string]string{"Dockerfile": filepath.Join(b.cfg.Root, "deploy", "Dockerfile"), "allot": bin}, nil
}

// ---- etcd ----

const etcdModule = "go.etcd.io/etcd/server/v3"

func (b *builder) etcdVersion(ctx context.Context) (string, error) {
	v, err := b.goOut(ctx, b.cfg.Root, nil, "list", "-m", "-f", "{{.Version}}", etcdModule)
	if err != nil {
		return "", fmt.Errorf("etcd version from go.mod: %w", err)
	}
	return strings.TrimSpace(v), nil
}

func (b *builder) etcdHash(ctx context.Context) (string, error) {
	v, err := b.etcdVersion(ctx)
	if err != nil {
		return "", err
	}
	ver, err := b.goOut(ctx, b.cfg.Root, nil, "env", "GOVERSION")
	if err != nil {
		return "", err
	}
	h := newHasher()
	h.add("recipe", []byte(recipe))
	h.add("etcd", []byte(v))
	h.add("go", []byte(ver))
	if err := h.addFile("etcd.Dockerfile", filepath.Join(b.cfg.Root, "deploy", "images", "etcd.Dockerfile")); err != nil {
		return "", err
	}
	return h.sum(), nil
}

// etcdContext builds etcd in a throwaway module that requires only
// go.etcd.io/etcd/server/v3 at allot's version, so allot's go.mod never needs
// etcd's command-line dependencies.
func (b *builder) etcdContext(ctx context.Context, dir string) (map[string]string, error) {
	v, err := b.etcdVersion(ctx)
	if err != nil {
		return nil, err
	}
	mod := filepath.Join(dir, "mod")
	if err := os.MkdirAll(mod, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module allot.invalid/etcdbuild\n\ngo 1.26\n"), 0o644); err != nil {
		return nil, err
	}
	env := []string{"CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=mod"}
	b.logf("etcd: go get %s@%s (in a temporary module)", etcdModule, v)
	if _, err := b.goOut(ctx, mod, env, "get", etcdModule+"@"+v); err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, "etcd")
	b.logf("etcd: go build %s (static; a few minutes the first time)", etcdModule)
	if _, err := b.goOut(ctx, mod, env, "build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w", "-o", bin, etcdModule); err != nil {
		return nil, err
	}
	return map[string]string{"Dockerfile": filepath.Join(b.cfg.Root, "deploy", "images", "etcd.Dockerfile"), "etcd": bin}, nil
}

// ---- redis ----

var lddLine = regexp.MustCompile(`^\s*(?:\S+\s+=>\s+)?(/\S+)\s+\(0x[0-9a-f]+\)\s*$`)

// redisRootfs returns the files of the Redis image: path in the image ->
// path on the host (symlinks resolved when read).
func (b *builder) redisRootfs(ctx context.Context) (map[string]string, error) {
	if b.redisFiles != nil {
		return b.redisFiles, nil
	}
	real, err := filepath.EvalSymlinks(b.cfg.RedisServer)
	if err != nil {
		return nil, fmt.Errorf("redis-server: %w (install the redis-server package)", err)
	}
	cmd := exec.CommandContext(ctx, "ldd", real)
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", real, err)
	}
	files := map[string]string{"usr/bin/redis-server": real}
	loader := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := lddLine.FindStringSubmatch(sc.Text())
		if m == nil {
			if strings.Contains(sc.Text(), "not found") {
				return nil, fmt.Errorf("ldd %s: %s", real, strings.TrimSpace(sc.Text()))
			}
			continue // linux-vdso and the like: no file
		}
		p := m[1]
		files[strings.TrimPrefix(p, "/")] = p
		loader = loader || strings.HasPrefix(filepath.Base(p), "ld-linux")
	}
	if !loader {
		return nil, fmt.Errorf("ldd %s: no loader listed: %q", real, out)
	}
	b.redisFiles = files
	return files, nil
}

func (b *builder) redisHash(ctx context.Context) (string, error) {
	files, err := b.redisRootfs(ctx)
	if err != nil {
		return "", err
	}
	h := newHasher()
	h.add("recipe", []byte(recipe))
	if err := h.addFile("redis.Dockerfile", filepath.Join(b.cfg.Root, "deploy", "images", "redis.Dockerfile")); err != nil {
		return "", err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := h.addFile(n, files[n]); err != nil {
			return "", err
		}
	}
	return h.sum(), nil
}

func (b *builder) redisContext(ctx context.Context, _ string) (map[string]string, error) {
	files, err := b.redisRootfs(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]string{"Dockerfile": filepath.Join(b.cfg.Root, "deploy", "images", "redis.Dockerfile")}
	for n, p := range files {
		out["rootfs/"+n] = p
	}
	b.logf("redis: %s and %d libraries", files["usr/bin/redis-server"], len(files)-1)
	return out, nil
}

// ---- go ----

func goCommand() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if r := os.Getenv("GOROOT"); r != "" {
		return filepath.Join(r, "bin", "go")
	}
	return "go"
}

// rootModule is the module path of allot's go.mod, the one whose directory
// is Config.Root.
const rootModule = "github.com/allot-dev/allot"

// moduleRoot finds allot's go.mod: the working directory's module, or, from
// a nested module of the repository (e2e, deploy/images), the nearest
// directory above it whose go.mod declares rootModule.
func moduleRoot(ctx context.Context, goCmd string) (string, error) {
	out, err := exec.CommandContext(ctx, goCmd, "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside allot's module: run from the repository (or set Config.Root)")
	}
	return rootAbove(filepath.Dir(mod))
}

// rootAbove returns dir or the nearest directory above it whose go.mod
// declares rootModule.
func rootAbove(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if modulePath(filepath.Join(d, "go.mod")) == rootModule {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod of %s at or above %s: run from the repository (or set Config.Root)", rootModule, dir)
		}
	}
}

// modulePath returns the path the module directive of the go.mod at file
// declares, or "" when there is no such file or directive.
func modulePath(file string) string {
	data, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}

// goOut runs the go command in dir with extra environment and returns its
// standard output; a failure carries its standard error.
func (b *builder) goOut(ctx context.Context, dir string, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, b.cfg.Go, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}
