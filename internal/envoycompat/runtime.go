package envoycompat

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/allot-dev/allot/policy/envoyconf"
)

// Runtime is the directory layout envoyproxy/ratelimit reads its
// configuration files from.
//
// With WatchRoot (the default) the files are those under
// Root/Subdirectory whose key starts with AppDirectory + "." — a file's key
// is its path below Root/Subdirectory with '/' written as '.', so by
// default the files under Root/Subdirectory/config/. Without WatchRoot,
// every file under Root/Subdirectory/AppDirectory. IgnoreDotFiles skips
// files and directories whose name starts with '.' (a Kubernetes ConfigMap
// volume keeps its files twice, under ..data and a timestamped directory:
// set it there). Symbolic links to files are followed; links to
// directories are not descended, as the original does, except Root itself.
type Runtime struct {
	Root, Subdirectory, AppDirectory string
	WatchRoot, IgnoreDotFiles        bool
	// Merge joins a domain found in several files (MERGE_DOMAIN_CONFIG).
	Merge bool
}

// RuntimeOf returns the layout the settings describe.
func RuntimeOf(s Settings) Runtime {
	return Runtime{
		Root: s.RuntimeRoot, Subdirectory: s.RuntimeSubdirectory, AppDirectory: s.RuntimeAppDirectory,
		WatchRoot: s.RuntimeWatchRoot, IgnoreDotFiles: s.RuntimeIgnoreDot, Merge: s.MergeDomainConfig,
	}
}

// Dir is the directory walked for files.
func (r Runtime) Dir() string {
	if r.WatchRoot {
		return filepath.Join(r.Root, r.Subdirectory)
	}
	return filepath.Join(r.Root, r.Subdirectory, r.AppDirectory)
}

// file is one configuration file found.
type file struct {
	key  string
	data []byte
}

// read returns the configuration files, sorted by key, and what it
// skipped: a file or directory it may not read is left out with a
// warning, as the original leaves it out (a volume's lost+found, a file
// another user owns), rather than failing the whole configuration.
func (r Runtime) read() ([]file, []string, error) {
	dir := r.Dir()
	// The root is commonly a symbolic link (…/current → a version): walk
	// what it points to.
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("runtime directory %s (RUNTIME_ROOT, RUNTIME_SUBDIRECTORY): %w", dir, err)
	}
	var out []file
	var skipped []string
	err = filepath.WalkDir(real, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == real {
				return err
			}
			skipped = append(skipped, fmt.Sprintf("%s: %v", path, err))
			if d != nil && d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		dot := strings.HasPrefix(d.Name(), ".") && path != real
		if d.IsDir() {
			if dot && r.IgnoreDotFiles {
				return filepath.SkipDir
			}
			return nil
		}
		if dot && r.IgnoreDotFiles {
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			st, err := os.Stat(path)
			if err != nil || st.IsDir() {
				return nil // a dangling link, or one to a directory: not a file
			}
		} else if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(real, path)
		if err != nil {
			return err
		}
		key := strings.ReplaceAll(filepath.ToSlash(rel), "/", ".")
		if r.WatchRoot && !strings.HasPrefix(key, r.AppDirectory+".") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("%s: %v", path, err))
			return nil
		}
		out = append(out, file{key: key, data: data})
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("runtime directory %s: %w", dir, err)
	}
	slices.SortFunc(out, func(a, b file) int { return strings.Compare(a.key, b.key) })
	return out, skipped, nil
}

// build parses and joins files. Each file is named by its key in errors, as
// the original names it.
func (r Runtime) build(files []file) (*envoyconf.Config, error) {
	parsed := make([]*envoyconf.File, 0, len(files))
	for _, f := range files {
		pf, err := envoyconf.ParseFile(f.key, f.data)
		if err != nil {
			return nil, err
		}
		parsed = append(parsed, pf)
	}
	return envoyconf.Build(parsed, r.Merge)
}

// Load reads and checks every configuration file once. skipped lists the
// files and directories left out because they could not be read.
func (r Runtime) Load() (cfg *envoyconf.Config, skipped []string, err error) {
	files, skipped, err := r.read()
	if err != nil {
		return nil, nil, err
	}
	cfg, err = r.build(files)
	return cfg, skipped, err
}

func fingerprint(files []file) [sha256.Size]byte {
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%d:%s:%d:", len(f.key), f.key, len(f.data))
		h.Write(f.data)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// Watch loads the configuration, hands it to apply, and again whenever a
// file under Dir changes (checked every poll), until ctx ends. A
// configuration that fails to read, parse or apply is logged and counted
// (onLoad(false)), and the last good one stays: apply is never called with
// a broken configuration. The first load's outcome is returned through
// first (nil: applied), once, so that a caller can wait for it.
func (r Runtime) Watch(ctx context.Context, poll time.Duration, log *slog.Logger, apply func(*envoyconf.Config) error, onLoad func(ok bool), first chan<- error) error {
	if poll <= 0 {
		return errors.New("runtime watch: poll: must be positive")
	}
	var last [sha256.Size]byte
	loaded, reported := false, false
	report := func(err error) {
		if !reported && first != nil {
			first <- err
			reported = true
		}
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		files, skipped, err := r.read()
		if err == nil {
			fp := fingerprint(files)
			if !loaded || fp != last {
				last, loaded = fp, true
				for _, sk := range skipped {
					log.Warn("runtime directory: left out, unreadable", "entry", sk)
				}
				var cfg *envoyconf.Config
				if cfg, err = r.build(files); err == nil {
					err = apply(cfg)
				}
				if err == nil {
					log.Info("loaded rate limit configuration", "dir", r.Dir(), "files", len(files), "domains", len(cfg.Domains()), "limits", cfg.Limits())
				} else {
					log.Error("rate limit configuration rejected; keeping the last good one", "dir", r.Dir(), "err", err)
				}
				if onLoad != nil {
					onLoad(err == nil)
				}
				report(err)
			}
		} else if !loaded || last != [sha256.Size]byte{} {
			// Unreadable: say so once per change of state.
			log.Error("rate limit configuration unreadable; keeping the last good one", "err", err)
			last, loaded = [sha256.Size]byte{}, true
			if onLoad != nil {
				onLoad(false)
			}
			report(err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
