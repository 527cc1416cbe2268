package envoycompat

import (
	"slices"
	"strings"
	"testing"
)

func TestParseGlobal(t *testing.T) {
	m, err := ParseGlobal("g.yaml", []byte("global:\n  - limit: edge.path_/api\n    tenant: edge-api\n  - limit: edge.client_web\n    tenant: web\n"+
		"  - limit: edge.remote_address\n    tenant: edge-ip\n    descriptors: [client_ip]\n"))
	if err != nil || len(m) != 3 || m["edge.path_/api"].Tenant != "edge-api" || m["edge.client_web"].Tenant != "web" || m["edge.path_/api"].Descriptors != nil {
		t.Fatalf("ParseGlobal = %v, %v", m, err)
	}
	if g := m["edge.remote_address"]; g.Tenant != "edge-ip" || !slices.Equal(g.Descriptors, []string{"client_ip"}) || g.Where != "g.yaml: global[2]" {
		t.Errorf("ParseGlobal: edge.remote_address = %+v, want tenant edge-ip, descriptors [client_ip], where g.yaml: global[2]", g)
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
		{"global:\n  - limit: a\n    tenant: t\n    descriptors: []\n", "global[0].descriptors: empty"},
		{"global:\n  - limit: a\n    tenant: t\n    descriptors: [ip, X-User]\n", "global[0].descriptors[1]"},
		{"global:\n  - limit: a\n    tenant: t\n    descriptors: [tenant]\n", "global[0].descriptors[0]"},
		{"global:\n  - limit: a\n    tenant: t\n    descriptors: [ip, ip]\n", "global[0].descriptors[1]"},
		{"global:\n  - limit: a\n    tenant: t\n    descriptors: ip\n", "line 4"},
	} {
		if _, err := ParseGlobal("g.yaml", []byte(c.doc)); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "g.yaml") {
			t.Errorf("%q: %v, want an error naming g.yaml and %s", c.doc, err, c.want)
		}
	}
}
