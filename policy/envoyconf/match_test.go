package envoyconf_test

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/policy/envoyconf"
)

func build(t *testing.T, merge bool, files ...string) *envoyconf.Config {
	t.Helper()
	var fs []*envoyconf.File
	for i, content := range files {
		f, err := envoyconf.ParseFile("f"+string(rune('0'+i))+".yaml", []byte(content))
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, f)
	}
	c, err := envoyconf.Build(fs, merge)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func fixture(t *testing.T, name string) *envoyconf.Config {
	f, err := parse(t, filepath.Join(envoyDir(t), "test", "config", name))
	if err != nil {
		t.Fatal(err)
	}
	c, err := envoyconf.Build([]*envoyconf.File{f}, false)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// entries reads "k=v,k2=v2".
func entries(s string) []envoyconf.Entry {
	var out []envoyconf.Entry
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		out = append(out, envoyconf.Entry{Key: k, Value: v})
	}
	return out
}

type matchCase struct {
	req  string
	path string // "" when no limit applies
	n    uint32
	unit string
}

func checkMatches(t *testing.T, c *envoyconf.Config, domain string, cases []matchCase) {
	t.Helper()
	for _, tc := range cases {
		m, ok := c.Match(domain, entries(tc.req))
		switch {
		case tc.path == "" && ok:
			t.Errorf("%s: limit %s, want none", tc.req, m.Limit.Path)
		case tc.path == "":
		case !ok:
			t.Errorf("%s: no limit, want %s", tc.req, tc.path)
		case m.Limit.Path != tc.path || m.Limit.RequestsPerUnit != tc.n || m.Limit.Unit != tc.unit:
			t.Errorf("%s: %s %d/%s, want %s %d/%s", tc.req, m.Limit.Path, m.Limit.RequestsPerUnit, m.Limit.Unit, tc.path, tc.n, tc.unit)
		}
	}
}

// The original's basic fixture: exact value over bare key, a value with no
// limit whitelists, a limit applies only at the request's last entry.
func TestMatchBasic(t *testing.T) {
	c := fixture(t, "basic_config.yaml")
	if _, ok := c.Match("foo_domain", entries("key2=x")); ok {
		t.Error("unknown domain matched")
	}
	if _, ok := c.Match("test-domain", nil); ok {
		t.Error("empty descriptor matched")
	}
	checkMatches(t, c, "test-domain", []matchCase{
		{req: "key1=something"},
		{req: "key1=value1"}, // no limit at depth 1
		{req: "key2=value2,subkey=subvalue"},
		{req: "key5=value5,subkey5=subvalue"},
		{req: "key1=value1,subkey1=something", path: "test-domain.key1_value1.subkey1", n: 5, unit: "SECOND"},
		{req: "key1=value1,subkey1=subvalue1", path: "test-domain.key1_value1.subkey1_subvalue1", n: 10, unit: "SECOND"},
		{req: "key2=something", path: "test-domain.key2", n: 20, unit: "MINUTE"},
		{req: "key2=value2", path: "test-domain.key2_value2", n: 30, unit: "MINUTE"},
		{req: "key2=value3"}, // whitelisted
		{req: "key3=foo", path: "test-domain.key3", n: 1, unit: "HOUR"},
		{req: "key4=foo", path: "test-domain.key4", n: 1, unit: "DAY"},
		{req: "key5=value5", path: "test-domain.key5_value5", n: 15, unit: "DAY"},
		{req: "key5=value5,subkey5=subvalue5", path: "test-domain.key5_value5.subkey5_subvalue5", n: 25, unit: "DAY"},
		{req: "key3=foo,extra=1"}, // key3 has no children: deeper requests are unlimited
		{req: "key7=x", path: "test-domain.key7", n: 70, unit: "MINUTE"},
	})
	m, ok := c.Match("test-domain", entries("key6=x"))
	if !ok || !m.Limit.Unlimited {
		t.Fatalf("key6: %+v %v, want unlimited", m.Limit, ok)
	}
	if m, _ := c.Match("test-domain", entries("key4=foo")); m.Limit.Name != "key4_rate_limit" {
		t.Errorf("key4's name %q", m.Limit.Name)
	}
	if m, _ := c.Match("test-domain", entries("key7=x")); !m.Limit.DetailedMetric {
		t.Error("key7: detailed_metric lost")
	}
}

// Wildcards: a value ending in '*' matches every value it prefixes, only at
// its end; an exact value is tried first.
func TestMatchWildcard(t *testing.T) {
	c := fixture(t, "wildcard.yaml")
	checkMatches(t, c, "test-domain", []matchCase{
		{req: "wild=foo", path: "test-domain.wild_foo*", n: 20, unit: "MINUTE"},
		{req: "wild=foobar", path: "test-domain.wild_foo*", n: 20, unit: "MINUTE"},
		{req: "wild=fo"},
		{req: "noWild=foo", path: "test-domain.noWild_foo", n: 20, unit: "MINUTE"},
		{req: "noWild=foobar"},
		{req: "noVal=anything", path: "test-domain.noVal", n: 20, unit: "MINUTE"},
		{req: "midWild=barfoob"}, // '*' only at the end is a wildcard
		{req: "midWild=bar*b", path: "test-domain.midWild_bar*b", n: 20, unit: "MINUTE"},
		{req: "nestedWild=val1,wild=goober", path: "test-domain.nestedWild_val1.wild_goo*", n: 20, unit: "MINUTE"},
		{req: "nestedWild=val1,wild=foo"},
	})
	// Without share_threshold each value counts on its own.
	a, _ := c.Match("test-domain", entries("wild=foo1"))
	b, _ := c.Match("test-domain", entries("wild=foo2"))
	if slices.Equal(a.Entries, b.Entries) {
		t.Fatal("two values of one wildcard share a counter without share_threshold")
	}
}

// share_threshold: every value a wildcard matches shares one counter.
func TestMatchShareThreshold(t *testing.T) {
	c := fixture(t, "share_threshold.yaml")
	a, ok1 := c.Match("test-domain", entries("files=files/a.txt"))
	b, ok2 := c.Match("test-domain", entries("files=files/b.txt"))
	if !ok1 || !ok2 || a.Limit.RequestsPerUnit != 100 {
		t.Fatalf("files: %v %v", a.Limit, ok2)
	}
	if !slices.Equal(a.Entries, b.Entries) || a.Entries[0].Value != "files/*" {
		t.Fatalf("shared counter entries %v and %v, want one, files/*", a.Entries, b.Entries)
	}
	n1, _ := c.Match("test-domain", entries("files=top/x,files=nested/1"))
	n2, _ := c.Match("test-domain", entries("files=top/y,files=nested/2"))
	if n1.Limit == nil || n1.Limit.RequestsPerUnit != 300 || !slices.Equal(n1.Entries, n2.Entries) {
		t.Fatalf("nested share: %+v %+v", n1, n2)
	}
	// The request's own entries are not changed.
	req := entries("files=files/a.txt")
	c.Match("test-domain", req)
	if req[0].Value != "files/a.txt" {
		t.Fatal("Match changed the caller's entries")
	}
}

func TestReplaced(t *testing.T) {
	c := build(t, false, `
domain: d
descriptors:
  - key: a
    rate_limit: {name: small, unit: second, requests_per_unit: 1}
  - key: b
    rate_limit: {name: big, unit: second, requests_per_unit: 100, replaces: [{name: small}]}
  - key: u
    rate_limit: {unlimited: true, replaces: [{name: big}]}
  - key: z
    rate_limit: {unit: second, requests_per_unit: 0}
`)
	lim := func(req string) *envoyconf.Limit {
		m, _ := c.Match("d", entries(req))
		return m.Limit
	}
	if got := envoyconf.Replaced([]*envoyconf.Limit{lim("a=1"), nil}); got != nil {
		t.Errorf("nothing replaces: %v", got)
	}
	if got := envoyconf.Replaced([]*envoyconf.Limit{lim("a=1"), lim("b=1")}); !slices.Equal(got, []bool{true, false}) {
		t.Errorf("b replaces a: %v", got)
	}
	if got := envoyconf.Replaced([]*envoyconf.Limit{lim("a=1"), lim("b=1"), lim("u=1")}); !slices.Equal(got, []bool{true, true, false}) {
		t.Errorf("an unlimited limit's replaces apply too: %v", got)
	}
	if _, _, ok := lim("z=1").GCRA(); ok {
		t.Error("requests_per_unit 0 gave a GCRA limit: it admits nothing")
	}
	r, b, ok := lim("b=1").GCRA()
	if !ok || r.Count != 100 || r.Period != time.Second || b != 100 {
		t.Errorf("b: %v %d %v", r, b, ok)
	}
}

func TestUnits(t *testing.T) {
	for unit, want := range map[string]time.Duration{
		"second": time.Second, "MINUTE": time.Minute, "Hour": time.Hour, "day": 24 * time.Hour,
		"week": 7 * 24 * time.Hour, "month": 30 * 24 * time.Hour, "year": 365 * 24 * time.Hour,
	} {
		c := build(t, false, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: "+unit+", requests_per_unit: 3}\n")
		m, ok := c.Match("d", entries("k=v"))
		if !ok || m.Limit.Period() != want {
			t.Errorf("%s: %v", unit, m.Limit)
		}
	}
}

// What the original accepts and allot cannot enforce, and what it rejects
// that the fixtures do not cover: each error names its line and field.
func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, field, msg string }{
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 2000000}\n", "descriptors[0].rate_limit.requests_per_unit", "more than allot enforces"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n", "descriptors[0].rate_limit.requests_per_unit", "want a whole number"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1.5}\n", "descriptors[0].rate_limit.requests_per_unit", "error checking config"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}\n", "descriptors[0].rate_limit.unit", "invalid rate limit unit ''"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: unknown, requests_per_unit: 1}\n", "descriptors[0].rate_limit.unit", "invalid rate limit unit 'unknown'"},
		{"domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n", "descriptors[0].share_threshold", "only be used with wildcard"},
		{"domain: d\ndescriptors: {key: k}\n", "descriptors", "want a list"},
		{"domain: []\n", "domain", "want a string"},
		{"- a\n", "", "want a mapping"},
		{"domain: d\ndescriptors:\n  - key: k\n    shadow_mode: maybe\n", "descriptors[0].shadow_mode", "want true or false"},
	} {
		f, err := envoyconf.ParseFile("x.yaml", []byte(tc.yaml))
		if err == nil {
			_, err = envoyconf.Build([]*envoyconf.File{f}, false)
		}
		var fe *envoyconf.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(fe.Msg, tc.msg) || fe.Line == 0 {
			t.Errorf("%q: got %v, want field %q, %q, a line", tc.yaml, err, tc.field, tc.msg)
		}
	}
}

// Flags may come before or after the rate_limit in a descriptor.
func TestFlagsAnyOrder(t *testing.T) {
	c := build(t, false, `
domain: d
descriptors:
  - key: a
    shadow_mode: true
    quota_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: second, requests_per_unit: 1}
    shadow_mode: true
  - key: c
    shadow_mode: true
`)
	for _, k := range []string{"a", "b"} {
		m, ok := c.Match("d", entries(k+"=1"))
		if !ok || !m.Limit.Shadow {
			t.Errorf("%s: shadow lost: %+v", k, m.Limit)
		}
	}
	if m, _ := c.Match("d", entries("a=1")); !m.Limit.Quota {
		t.Error("a: quota_mode lost")
	}
	if _, ok := c.Match("d", entries("c=1")); ok {
		t.Error("c has flags but no rate_limit: want no limit")
	}
	if c.Limits() != 2 {
		t.Errorf("Limits %d, want 2", c.Limits())
	}
}

func FuzzParseFile(f *testing.F) {
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    value: v*\n    rate_limit: {unit: second, requests_per_unit: 5}\n"))
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: j\n        rate_limit: {unlimited: true}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := envoyconf.ParseFile("f.yaml", data)
		if err != nil {
			var fe *envoyconf.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("%T: %v", err, err)
			}
			return
		}
		c, err := envoyconf.Build([]*envoyconf.File{file}, false)
		if err != nil {
			return
		}
		for _, d := range c.Domains() {
			c.Match(d, []envoyconf.Entry{{Key: "k", Value: "v1"}, {Key: "j", Value: ""}})
		}
	})
}

func TestPerValue(t *testing.T) {
	f, err := envoyconf.ParseFile("c.yaml", []byte(`domain: d
descriptors:
  - key: fixed
    value: a
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: sub
        value: b
        rate_limit: {unit: second, requests_per_unit: 1}
      - key: any
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: bare
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: under
        value: x
        rate_limit: {unit: second, requests_per_unit: 1}
      - key: deeper
        descriptors:
          - key: x
            value: "1"
            rate_limit: {unit: second, requests_per_unit: 1}
  - key: wild
    value: p*
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: shared
    value: p*
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	c, err := envoyconf.Build([]*envoyconf.File{f}, false)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string][]envoyconf.PerValueEntry{
		"d.fixed_a":         nil,
		"d.fixed_a.sub_b":   nil,
		"d.fixed_a.any":     {{Index: 1, Key: "any"}},
		"d.bare":            {{Index: 0, Key: "bare"}},
		"d.bare.under_x":    {{Index: 0, Key: "bare"}},
		"d.bare.deeper.x_1": {{Index: 0, Key: "bare"}, {Index: 1, Key: "deeper"}},
		"d.wild_p*":         {{Index: 0, Key: "wild"}},
		"d.shared_p*":       nil,
	} {
		l, ok := c.Limit(path)
		if !ok {
			t.Errorf("no limit at %s", path)
			continue
		}
		if l.PerValue != (want != nil) || !slices.Equal(l.PerValueEntries, want) {
			t.Errorf("%s: PerValue, PerValueEntries = %v, %v, want %v, %v", path, l.PerValue, l.PerValueEntries, want != nil, want)
		}
	}
	if _, ok := c.Limit("d.nothing"); ok {
		t.Error("Limit found a path that is not there")
	}
}

// CheckGlobal takes a limit of one counter and one counted per value, the
// latter decided under its entries' keys or the names given, and refuses
// every bad entry naming its field.
func TestCheckGlobal(t *testing.T) {
	c := build(t, false, `domain: edge
descriptors:
  - key: path
    value: /api
    rate_limit: {unit: second, requests_per_unit: 40}
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 60}
  - key: X-Client
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    descriptors:
      - key: a
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
`)
	for _, ok := range []struct {
		path string
		g    envoyconf.Global
		want []string
	}{
		{"edge.path_/api", envoyconf.Global{Tenant: "t"}, nil},
		{"edge.path_/api.user", envoyconf.Global{Tenant: "t"}, []string{"user"}},
		{"edge.remote_address", envoyconf.Global{Tenant: "t", Descriptors: []string{"ip"}}, []string{"ip"}},
		{"edge.X-Client", envoyconf.Global{Tenant: "t", Descriptors: []string{"client"}}, []string{"client"}},
		{"edge.a.a", envoyconf.Global{Tenant: "t", Descriptors: []string{"a", "b"}}, []string{"a", "b"}},
	} {
		got, err := c.CheckGlobal(ok.path, ok.g)
		if err != nil || !slices.Equal(got, ok.want) {
			t.Errorf("CheckGlobal(%s, %+v) = %v, %v, want %v", ok.path, ok.g, got, err, ok.want)
		}
	}
	w := "g.yaml: global[3]"
	for _, bad := range []struct {
		path string
		g    envoyconf.Global
		want string
	}{
		{"edge.nope", envoyconf.Global{Tenant: "t", Where: w}, w + ".limit: "},
		{"edge.free", envoyconf.Global{Tenant: "t", Where: w}, w + ".limit: "},
		{"edge.path_/api", envoyconf.Global{Tenant: "a/b", Where: w}, w + ".tenant: "},
		{"edge.path_/api", envoyconf.Global{Tenant: "t", Descriptors: []string{"x"}, Where: w}, w + ".descriptors: "},
		{"edge.X-Client", envoyconf.Global{Tenant: "t", Where: w}, w + `.descriptors: global limit "edge.X-Client": missing, and entry 0's key "X-Client"`},
		{"edge.remote_address", envoyconf.Global{Tenant: "t", Descriptors: []string{"a", "b"}, Where: w}, w + ".descriptors: "},
		{"edge.remote_address", envoyconf.Global{Tenant: "t", Descriptors: []string{"Bad"}, Where: w}, w + ".descriptors[0]: "},
		{"edge.remote_address", envoyconf.Global{Tenant: "t", Descriptors: []string{"tenant"}, Where: w}, w + ".descriptors[0]: "},
		{"edge.a.a", envoyconf.Global{Tenant: "t", Where: w}, w + ".descriptors: "},
		{"edge.a.a", envoyconf.Global{Tenant: "t", Descriptors: []string{"a", "a"}, Where: w}, w + ".descriptors[1]: "},
		{"edge.nope", envoyconf.Global{Tenant: "t"}, `global limit "edge.nope": limit: no such limit`},
	} {
		if got, err := c.CheckGlobal(bad.path, bad.g); err == nil || !strings.HasPrefix(err.Error(), bad.want) {
			t.Errorf("CheckGlobal(%s, %+v) = %v, %v, want an error starting %q", bad.path, bad.g, got, err, bad.want)
		}
	}
}
