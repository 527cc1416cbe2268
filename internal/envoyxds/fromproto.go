package envoyxds

import (
	"errors"
	"strconv"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"

	"github.com/allot-dev/allot/policy/envoyconf"
)

// FromProto converts one RateLimitConfig resource into an envoyconf.File.
// It writes the resource as the YAML file the original service would read
// for it and parses that with envoyconf.ParseFile, so a resource passes
// exactly the checks of a file; it also runs the checks of envoyconf.Build
// that concern one file alone (empty key, duplicate keys), so that a bad
// resource is rejected here, by name, rather than when the set is joined.
//
// name is how errors name the resource (the subscriber uses "xds:" and
// the resource's name). Errors are *envoyconf.FieldError (wrapping
// envoyconf.ErrConfig) with the field's path, e.g.
// descriptors[0].rate_limit.unit, and no line: the document is never seen.
func FromProto(name string, c *rlsconfv3.RateLimitConfig) (*envoyconf.File, error) {
	if c == nil {
		return nil, &envoyconf.FieldError{File: name, Msg: "no RateLimitConfig"}
	}
	data, err := yaml.Marshal(document(c))
	if err != nil {
		return nil, &envoyconf.FieldError{File: name, Msg: "cannot write the resource as YAML: " + err.Error()}
	}
	f, err := envoyconf.ParseFile(name, data)
	if err != nil {
		return nil, lineless(err)
	}
	if _, err := envoyconf.Build([]*envoyconf.File{f}, false); err != nil {
		return nil, lineless(err)
	}
	return f, nil
}

// lineless drops the line of a FieldError: it is a line of the generated
// document, which nobody sees; the field path locates the error.
func lineless(err error) error {
	var fe *envoyconf.FieldError
	if errors.As(err, &fe) {
		c := *fe
		c.Line = 0
		return &c
	}
	return err
}

// The document is built from yaml.Nodes, so that every string stays a
// string whatever it looks like ("true", "10", "~") and keys keep the
// proto's field order.

func document(c *rlsconfv3.RateLimitConfig) *yaml.Node {
	m := mapping()
	add(m, "domain", str(c.GetDomain()))
	if ds := c.GetDescriptors(); len(ds) > 0 {
		add(m, "descriptors", descriptors(ds))
	}
	return m
}

func descriptors(ds []*rlsconfv3.RateLimitDescriptor) *yaml.Node {
	seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for _, d := range ds {
		m := mapping()
		add(m, "key", str(d.GetKey()))
		if v := d.GetValue(); v != "" {
			add(m, "value", str(v))
		}
		if rl := d.GetRateLimit(); rl != nil {
			add(m, "rate_limit", rateLimit(rl))
		}
		if sub := d.GetDescriptors(); len(sub) > 0 {
			add(m, "descriptors", descriptors(sub))
		}
		if d.GetShadowMode() {
			add(m, "shadow_mode", boolean(true))
		}
		if d.GetDetailedMetric() {
			add(m, "detailed_metric", boolean(true))
		}
		seq.Content = append(seq.Content, m)
	}
	return seq
}

func rateLimit(rl *rlsconfv3.RateLimitPolicy) *yaml.Node {
	m := mapping()
	// The enum's name (SECOND … YEAR, UNKNOWN), or its number when the
	// proto does not know it: ParseFile rejects both of the latter unless
	// the limit is unlimited, as the original does.
	add(m, "unit", str(rl.GetUnit().String()))
	add(m, "requests_per_unit", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatUint(uint64(rl.GetRequestsPerUnit()), 10)})
	if rl.GetUnlimited() {
		add(m, "unlimited", boolean(true))
	}
	if n := rl.GetName(); n != "" {
		add(m, "name", str(n))
	}
	if rs := rl.GetReplaces(); len(rs) > 0 {
		seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for _, r := range rs {
			e := mapping()
			add(e, "name", str(r.GetName()))
			seq.Content = append(seq.Content, e)
		}
		add(m, "replaces", seq)
	}
	return m
}

func mapping() *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"} }

func add(m *yaml.Node, key string, v *yaml.Node) {
	m.Content = append(m.Content, str(key), v)
}

func str(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s, Style: yaml.DoubleQuotedStyle}
}

func boolean(b bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(b)}
}
