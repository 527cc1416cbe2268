package shares_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The pure packages read no clock: time is a parameter. This fails if a
// non-test Go file of shares or of gcra's root package mentions time.Now.
func TestNoWallClock(t *testing.T) {
	for _, dir := range []string{".", "../gcra"} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		checked := 0
		for _, e := range entries {
			name := e.Name()
			if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
				continue
			}
			src, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			checked++
			for i, line := range strings.Split(string(src), "\n") {
				if strings.Contains(line, "time.Now") {
					t.Errorf("%s:%d: %s: pure packages take time as a parameter", filepath.Join(dir, name), i+1, strings.TrimSpace(line))
				}
			}
		}
		if checked == 0 {
			t.Fatalf("%s: no Go file checked", dir)
		}
	}
}
