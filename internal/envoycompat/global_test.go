package envoycompat

import (
	"strings"
	"testing"
)

func TestParseGlobal(t *testing.T) {
	m, err := ParseGlobal("g.yaml", []byte("global:\n  - limit: edge.path_/api\n    tenant: edge-api\n  - limit: edge.client_web\n    tenant: web\n"))
	if err != nil || len(m) != 2 || m["edge.path_/api"] != "edge-api" || m["edge.client_web"] != "web" {
		t.Fatalf("ParseGlobal = %v, %v", m, err)
	}
	if m, err := ParseGlobal("g.yaml", nil); err != nil || len(m) != 0 {
		t.Errorf("empty file = %v, %v", m, err)
	}
	for _, c := range []struct{ doc, want string }{
		{"global:\n  - limit: a\n", "global[0].tenant"},
		{"global:\n  - tenant: t\n", "global[0].limit"},
		{"global:\n  - limit: a\n    tenant: 'x/y'\n", "global[0].tenant"},
		{"global:\n  - limit: a\n    tenant: t\n  - limit: a\n    tenant: u\n", "global[1].limit"},
		{"global:\n  - limit: a\n    tenant: t\n    rate: 5/s\n", "rate"},
		{"globals: []\n", "globals"},
	} {
		if _, err := ParseGlobal("g.yaml", []byte(c.doc)); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "g.yaml") {
			t.Errorf("%q: %v, want an error naming g.yaml and %s", c.doc, err, c.want)
		}
	}
}
