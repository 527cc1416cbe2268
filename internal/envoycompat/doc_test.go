package envoycompat

import (
	"os"
	"strings"
	"testing"
)

// TestDocsNameEverySetting keeps docs/envoy-ratelimit.md true: every
// variable FromEnv reads, and every one it accepts and ignores, is named
// there.
func TestDocsNameEverySetting(t *testing.T) {
	doc, err := os.ReadFile("../../docs/envoy-ratelimit.md")
	if err != nil {
		t.Fatal(err)
	}
	read := map[string]bool{}
	if _, _, err := FromEnv(func(k string) (string, bool) { read[k] = true; return "", false }); err != nil {
		t.Fatal(err)
	}
	if len(read) < 60 {
		t.Fatalf("FromEnv read only %d variables", len(read))
	}
	for k := range read {
		if !strings.Contains(string(doc), k) {
			t.Errorf("docs/envoy-ratelimit.md does not name %s", k)
		}
	}
}
