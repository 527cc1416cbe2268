package envoyxds

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/allot-dev/allot/policy/envoyconf"
)

func policy(unit rlsconfv3.RateLimitUnit, n uint32) *rlsconfv3.RateLimitPolicy {
	return &rlsconfv3.RateLimitPolicy{Unit: unit, RequestsPerUnit: n}
}

func desc(key, value string, rl *rlsconfv3.RateLimitPolicy, children ...*rlsconfv3.RateLimitDescriptor) *rlsconfv3.RateLimitDescriptor {
	return &rlsconfv3.RateLimitDescriptor{Key: key, Value: value, RateLimit: rl, Descriptors: children}
}

// rich holds every field the proto has, every unit, nesting, a wildcard,
// an unlimited limit and replaces.
func rich() *rlsconfv3.RateLimitConfig {
	login := policy(rlsconfv3.RateLimitUnit_MINUTE, 5)
	login.Name = "login"
	gold := policy(rlsconfv3.RateLimitUnit_HOUR, 100)
	gold.Replaces = []*rlsconfv3.RateLimitReplace{{Name: "login"}}
	wild := desc("path", "/login*", login)
	wild.ShadowMode = true
	goldD := desc("plan", "gold", gold)
	goldD.DetailedMetric = true
	return &rlsconfv3.RateLimitConfig{
		Name:   "edge-config",
		Domain: "edge",
		Descriptors: []*rlsconfv3.RateLimitDescriptor{
			desc("remote_address", "", policy(rlsconfv3.RateLimitUnit_SECOND, 10)),
			wild,
			desc("path", "/free", &rlsconfv3.RateLimitPolicy{Unlimited: true}),
			desc("user", "", nil,
				goldD,
				desc("plan", "", policy(rlsconfv3.RateLimitUnit_DAY, 1000)),
			),
			desc("weekly", "", policy(rlsconfv3.RateLimitUnit_WEEK, 7)),
			desc("monthly", "", policy(rlsconfv3.RateLimitUnit_MONTH, 30)),
			desc("yearly", "", policy(rlsconfv3.RateLimitUnit_YEAR, 365)),
			desc("closed", "", policy(rlsconfv3.RateLimitUnit_SECOND, 0)),
			// Strings that YAML would read as something else stay strings.
			desc("true", "~", policy(rlsconfv3.RateLimitUnit_SECOND, 1)),
			desc("10", "null: {a}", policy(rlsconfv3.RateLimitUnit_SECOND, 2)),
		},
	}
}

func buildOne(t *testing.T, c *rlsconfv3.RateLimitConfig) *envoyconf.Config {
	t.Helper()
	f, err := FromProto("xds:"+c.GetName(), c)
	if err != nil {
		t.Fatalf("FromProto: %v", err)
	}
	cfg, err := envoyconf.Build([]*envoyconf.File{f}, false)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return cfg
}

func TestFromProtoMatches(t *testing.T) {
	cfg := buildOne(t, rich())
	if got := cfg.Domains(); !slices.Equal(got, []string{"edge"}) {
		t.Fatalf("domains %v, want [edge]", got)
	}
	if got := cfg.Files(); !slices.Equal(got, []string{"xds:edge-config"}) {
		t.Errorf("files %v, want [xds:edge-config]", got)
	}
	type want struct {
		path      string
		unit      string
		period    time.Duration
		n         uint32
		unlimited bool
		shadow    bool
		detailed  bool
		name      string
		replaces  []string
	}
	day := 24 * time.Hour
	cases := []struct {
		name    string
		entries []envoyconf.Entry
		want    *want // nil: no limit applies
	}{
		{"second", []envoyconf.Entry{{Key: "remote_address", Value: "10.0.0.1"}}, &want{path: "edge.remote_address", unit: "SECOND", period: time.Second, n: 10}},
		{"wildcard shadow", []envoyconf.Entry{{Key: "path", Value: "/login/x"}}, &want{path: "edge.path_/login*", unit: "MINUTE", period: time.Minute, n: 5, shadow: true, name: "login"}},
		{"unlimited", []envoyconf.Entry{{Key: "path", Value: "/free"}}, &want{path: "edge.path_/free", unlimited: true}},
		{"no limit at depth 1", []envoyconf.Entry{{Key: "user", Value: "u1"}}, nil},
		{"nested exact", []envoyconf.Entry{{Key: "user", Value: "u1"}, {Key: "plan", Value: "gold"}}, &want{path: "edge.user.plan_gold", unit: "HOUR", period: time.Hour, n: 100, detailed: true, replaces: []string{"login"}}},
		{"nested bare key", []envoyconf.Entry{{Key: "user", Value: "u1"}, {Key: "plan", Value: "silver"}}, &want{path: "edge.user.plan", unit: "DAY", period: day, n: 1000}},
		{"week", []envoyconf.Entry{{Key: "weekly", Value: "x"}}, &want{path: "edge.weekly", unit: "WEEK", period: 7 * day, n: 7}},
		{"month", []envoyconf.Entry{{Key: "monthly", Value: "x"}}, &want{path: "edge.monthly", unit: "MONTH", period: 30 * day, n: 30}},
		{"year", []envoyconf.Entry{{Key: "yearly", Value: "x"}}, &want{path: "edge.yearly", unit: "YEAR", period: 365 * day, n: 365}},
		{"zero", []envoyconf.Entry{{Key: "closed", Value: "x"}}, &want{path: "edge.closed", unit: "SECOND", period: time.Second}},
		{"yaml-looking key and value", []envoyconf.Entry{{Key: "true", Value: "~"}}, &want{path: "edge.true_~", unit: "SECOND", period: time.Second, n: 1}},
		{"yaml-looking number and mapping", []envoyconf.Entry{{Key: "10", Value: "null: {a}"}}, &want{path: "edge.10_null: {a}", unit: "SECOND", period: time.Second, n: 2}},
		{"unknown key", []envoyconf.Entry{{Key: "nope", Value: "x"}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, ok := cfg.Match("edge", tc.entries)
			if tc.want == nil {
				if ok {
					t.Fatalf("matched %s, want no limit", m.Limit.Path)
				}
				return
			}
			if !ok {
				t.Fatal("no limit matched")
			}
			l, w := m.Limit, tc.want
			if l.Path != w.path || l.Unit != w.unit || l.RequestsPerUnit != w.n || l.Unlimited != w.unlimited ||
				l.Shadow != w.shadow || l.DetailedMetric != w.detailed || l.Name != w.name || !slices.Equal(l.Replaces, w.replaces) {
				t.Errorf("got %+v, want %+v", *l, *w)
			}
			if !w.unlimited && l.Period() != w.period {
				t.Errorf("period %v, want %v", l.Period(), w.period)
			}
			if l.Quota {
				t.Error("quota_mode set: the proto has no such field")
			}
		})
	}
	limits := make([]*envoyconf.Limit, 0, 3)
	for _, e := range [][]envoyconf.Entry{
		{{Key: "path", Value: "/login/x"}},
		{{Key: "user", Value: "u1"}, {Key: "plan", Value: "gold"}},
	} {
		m, _ := cfg.Match("edge", e)
		limits = append(limits, m.Limit)
	}
	if got := envoyconf.Replaced(limits); !slices.Equal(got, []bool{true, false}) {
		t.Errorf("Replaced %v, want [true false]: the gold plan replaces the login limit", got)
	}
}

// TestFromProtoSameAsFile: a resource and the YAML file the original
// would load for it give the same limits.
func TestFromProtoSameAsFile(t *testing.T) {
	const yml = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: path
    value: /login*
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5, name: login}
  - key: path
    value: /free
    rate_limit: {unlimited: true}
  - key: user
    descriptors:
      - key: plan
        value: gold
        detailed_metric: true
        rate_limit: {unit: hour, requests_per_unit: 100, replaces: [{name: login}]}
      - key: plan
        rate_limit: {unit: day, requests_per_unit: 1000}
  - key: weekly
    rate_limit: {unit: week, requests_per_unit: 7}
  - key: monthly
    rate_limit: {unit: month, requests_per_unit: 30}
  - key: yearly
    rate_limit: {unit: year, requests_per_unit: 365}
  - key: closed
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: "true"
    value: "~"
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: "10"
    value: "null: {a}"
    rate_limit: {unit: second, requests_per_unit: 2}
`
	f, err := envoyconf.ParseFile("edge.yaml", []byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	fromFile, err := envoyconf.Build([]*envoyconf.File{f}, false)
	if err != nil {
		t.Fatal(err)
	}
	fromProto := buildOne(t, rich())
	strip := func(ls []*envoyconf.Limit) []envoyconf.Limit {
		out := make([]envoyconf.Limit, len(ls))
		for i, l := range ls {
			out[i] = *l
			out[i].File, out[i].Line = "", 0
		}
		return out
	}
	a, b := strip(fromFile.All()), strip(fromProto.All())
	if !slices.EqualFunc(a, b, func(x, y envoyconf.Limit) bool {
		return x.Path == y.Path && x.Name == y.Name && x.Unit == y.Unit && x.RequestsPerUnit == y.RequestsPerUnit &&
			x.Unlimited == y.Unlimited && x.Shadow == y.Shadow && x.Quota == y.Quota && x.DetailedMetric == y.DetailedMetric &&
			slices.Equal(x.Replaces, y.Replaces)
	}) {
		t.Errorf("from the file:\n%+v\nfrom the proto:\n%+v", a, b)
	}
	for _, l := range fromProto.All() {
		if l.File != "xds:edge-config" {
			t.Errorf("limit %s: File %q, want xds:edge-config", l.Path, l.File)
		}
	}
}

func TestFromProtoRejects(t *testing.T) {
	withName := func(n string, replaces ...string) *rlsconfv3.RateLimitPolicy {
		p := policy(rlsconfv3.RateLimitUnit_SECOND, 1)
		p.Name = n
		for _, r := range replaces {
			p.Replaces = append(p.Replaces, &rlsconfv3.RateLimitReplace{Name: r})
		}
		return p
	}
	one := func(ds ...*rlsconfv3.RateLimitDescriptor) *rlsconfv3.RateLimitConfig {
		return &rlsconfv3.RateLimitConfig{Name: "bad", Domain: "edge", Descriptors: ds}
	}
	cases := []struct {
		name  string
		c     *rlsconfv3.RateLimitConfig
		field string
		msg   string
	}{
		{"nil", nil, "", "no RateLimitConfig"},
		{"empty domain", &rlsconfv3.RateLimitConfig{Name: "bad", Descriptors: []*rlsconfv3.RateLimitDescriptor{desc("k", "", policy(rlsconfv3.RateLimitUnit_SECOND, 1))}}, "domain", "empty domain"},
		{"unknown unit", one(desc("k", "", policy(rlsconfv3.RateLimitUnit_UNKNOWN, 1))), "descriptors[0].rate_limit.unit", "invalid rate limit unit 'UNKNOWN'"},
		{"undefined unit number", one(desc("k", "", policy(rlsconfv3.RateLimitUnit(42), 1))), "descriptors[0].rate_limit.unit", "invalid rate limit unit '42'"},
		{"unlimited with a unit", one(desc("k", "", &rlsconfv3.RateLimitPolicy{Unlimited: true, Unit: rlsconfv3.RateLimitUnit_MINUTE})), "descriptors[0].rate_limit.unit", "should not specify rate limit unit when unlimited"},
		{"empty key", one(desc("", "v", policy(rlsconfv3.RateLimitUnit_SECOND, 1))), "descriptors[0].key", "empty key"},
		{"nested empty key", one(desc("a", "", nil, desc("b", "", nil), desc("", "", nil))), "descriptors[0].descriptors[1].key", "empty key"},
		{"nested unknown unit", one(desc("a", "", nil, desc("b", "", policy(rlsconfv3.RateLimitUnit_UNKNOWN, 3)))), "descriptors[0].descriptors[0].rate_limit.unit", "UNKNOWN"},
		{"duplicate key", one(desc("k", "v", nil), desc("k", "v", nil)), "descriptors[1].key", "duplicate descriptor composite key 'edge.k_v'"},
		{"empty replaces", one(desc("k", "", withName("a", ""))), "descriptors[0].rate_limit.replaces[0].name", "empty replaces"},
		{"replaces itself", one(desc("k", "", withName("a", "b", "a"))), "descriptors[0].rate_limit.replaces[1].name", "same descriptor"},
		{"too fast for GCRA", one(desc("k", "", policy(rlsconfv3.RateLimitUnit_SECOND, 4_000_000_000))), "descriptors[0].rate_limit.requests_per_unit", "at most one unit per microsecond"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := FromProto("xds:bad", tc.c)
			if err == nil {
				t.Fatalf("accepted: %+v", f)
			}
			var fe *envoyconf.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %T %v, want a *envoyconf.FieldError", err, err)
			}
			if !errors.Is(err, envoyconf.ErrConfig) {
				t.Errorf("error %v does not wrap envoyconf.ErrConfig", err)
			}
			if fe.File != "xds:bad" || fe.Field != tc.field || fe.Line != 0 {
				t.Errorf("file %q field %q line %d, want xds:bad, %q, 0 (%v)", fe.File, fe.Field, fe.Line, tc.field, err)
			}
			if !strings.Contains(fe.Msg, tc.msg) {
				t.Errorf("message %q, want it to hold %q", fe.Msg, tc.msg)
			}
		})
	}
}

// FuzzFromProto: any RateLimitConfig converts or is rejected with a
// FieldError; one that converts builds, and holds one limit per
// rate_limit of the proto, at the path its strings make.
func FuzzFromProto(f *testing.F) {
	for _, c := range []*rlsconfv3.RateLimitConfig{
		rich(),
		{Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{desc("k", "", policy(rlsconfv3.RateLimitUnit_UNKNOWN, 1))}},
		{Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{desc("k", "v", &rlsconfv3.RateLimitPolicy{Unlimited: true})}},
		{Domain: "\x00\"'\n: #", Descriptors: []*rlsconfv3.RateLimitDescriptor{desc("- [", "&a *a", policy(rlsconfv3.RateLimitUnit_DAY, 1))}},
	} {
		b, err := proto.Marshal(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c := new(rlsconfv3.RateLimitConfig)
		if proto.Unmarshal(data, c) != nil {
			return
		}
		file, err := FromProto("fuzz", c)
		if err != nil {
			var fe *envoyconf.FieldError
			if !errors.As(err, &fe) || !errors.Is(err, envoyconf.ErrConfig) || fe.File != "fuzz" {
				t.Fatalf("error %T %v: want a *FieldError of file fuzz", err, err)
			}
			return
		}
		cfg, err := envoyconf.Build([]*envoyconf.File{file}, false)
		if err != nil {
			t.Fatalf("FromProto accepted what Build rejects: %v", err)
		}
		if !cfg.HasDomain(c.GetDomain()) {
			t.Fatalf("domain %q missing: %v", c.GetDomain(), cfg.Domains())
		}
		var want []string
		var walk func(prefix string, ds []*rlsconfv3.RateLimitDescriptor)
		walk = func(prefix string, ds []*rlsconfv3.RateLimitDescriptor) {
			for _, d := range ds {
				p := prefix + d.GetKey()
				if d.GetValue() != "" {
					p += "_" + d.GetValue()
				}
				if d.GetRateLimit() != nil {
					want = append(want, p)
				}
				walk(p+".", d.GetDescriptors())
			}
		}
		walk(c.GetDomain()+".", c.GetDescriptors())
		got := make([]string, 0, len(want))
		for _, l := range cfg.All() {
			got = append(got, l.Path)
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("limit paths %q, want %q", got, want)
		}
	})
}
