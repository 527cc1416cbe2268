package envoyconf

import (
	"errors"
	"fmt"
	"iter"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/policy"
)

// ErrConfig is wrapped by every error ParseFile and Build return.
var ErrConfig = errors.New("envoy ratelimit config")

// FieldError is a rejected part of a file: where it is and what is wrong.
type FieldError struct {
	File  string
	Line  int    // 0 when the error is not at one line
	Field string // the path of the field, e.g. descriptors[1].rate_limit.unit
	Msg   string
}

func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

func (e *FieldError) Unwrap() error { return ErrConfig }

// Units, as the original service names them (case does not matter in a
// file). Month is 30 days and year 365, as that service counts them.
var units = map[string]time.Duration{
	"SECOND": time.Second,
	"MINUTE": time.Minute,
	"HOUR":   time.Hour,
	"DAY":    24 * time.Hour,
	"WEEK":   7 * 24 * time.Hour,
	"MONTH":  30 * 24 * time.Hour,
	"YEAR":   365 * 24 * time.Hour,
}

// UnitPeriod returns the period of a unit name (SECOND … YEAR, any case).
func UnitPeriod(unit string) (time.Duration, bool) {
	p, ok := units[strings.ToUpper(unit)]
	return p, ok
}

// validKeys are the only mapping keys a file may hold, at any depth.
var validKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true,
	"rate_limit": true, "unit": true, "requests_per_unit": true,
	"unlimited": true, "shadow_mode": true, "quota_mode": true, "name": true,
	"replaces": true, "detailed_metric": true, "value_to_metric": true,
	"share_threshold": true,
}

// Limit is the rate limit of one node of a domain's tree.
type Limit struct {
	// Path is the node's full key, e.g. edge.path_/login* (the original
	// service's stats key): a limit's identity in metrics and answers.
	Path string
	// Name is the rate_limit's name (for replaces), may be empty.
	Name string
	// Unit is the unit's name, upper case (SECOND … YEAR); empty when
	// Unlimited.
	Unit            string
	RequestsPerUnit uint32
	Unlimited       bool
	Shadow          bool
	Quota           bool
	DetailedMetric  bool
	Replaces        []string
	// PerValue is set when the limit counts each value of some entry
	// apart (a bare key, or a wildcard value without share_threshold, on
	// its path): one counter per distinct descriptor, not one in all.
	PerValue bool
	// PerValueEntries are a PerValue limit's entries counted per value, in
	// path order: where each sits in a descriptor the limit matches (its
	// entries line up with the path, one per level) and its key.
	PerValueEntries []PerValueEntry
	// File and Line locate the rate_limit.
	File string
	Line int
}

// PerValueEntry is one entry of a limit's path whose value is counted
// apart: a bare key, or a wildcard value without share_threshold.
type PerValueEntry struct {
	Index int    // its position in a matching descriptor's entries
	Key   string // the entry's key
}

// Period is the length of the limit's unit.
func (l *Limit) Period() time.Duration { return units[l.Unit] }

// GCRA returns the rate and burst that enforce l: RequestsPerUnit per unit,
// a burst of RequestsPerUnit. ok is false when l admits nothing
// (requests_per_unit: 0) or is unlimited.
func (l *Limit) GCRA() (rate gcra.Rate, burst int64, ok bool) {
	if l.Unlimited || l.RequestsPerUnit == 0 {
		return gcra.Rate{}, 0, false
	}
	n := int64(l.RequestsPerUnit)
	return gcra.Rate{Count: n, Period: l.Period()}, n, true
}

type node struct {
	children  map[string]*node
	wildcards []string // children keys ending in '*', in file order
	limit     *Limit
	share     bool   // share_threshold
	pattern   string // the wildcard key when share
}

func newNode() *node { return &node{children: map[string]*node{}} }

// File is one parsed file.
type File struct {
	Name   string
	Domain string
	descs  []descriptor
}

type descriptor struct {
	key, value string
	line       int
	field      string
	limit      *Limit
	children   []descriptor
	// flags of the descriptor, applied to its limit
	share, shadow, quota, detailed bool
}

// ParseFile parses and checks one file's content. name is how errors name
// the file.
func ParseFile(name string, data []byte) (*File, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &FieldError{File: name, Msg: "error loading config file: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	p := parser{file: name}
	f := &File{Name: name}
	var root *yaml.Node
	if len(doc.Content) > 0 {
		root = doc.Content[0]
	}
	if root != nil && !isNull(root) {
		if root.Kind != yaml.MappingNode {
			return nil, p.errf(root, "", "want a mapping with domain and descriptors, found a %s", kindName(root))
		}
		if err := p.checkKeys(root, ""); err != nil {
			return nil, err
		}
		for k, v := range pairs(root) {
			var err error
			switch k.Value {
			case "domain":
				f.Domain, err = p.str(v, "domain")
			case "descriptors":
				f.descs, err = p.descriptors(v, "descriptors")
			default:
				err = p.errf(k, k.Value, "not a field of the file's top level (want domain and descriptors)")
			}
			if err != nil {
				return nil, err
			}
		}
	}
	if f.Domain == "" {
		line := 0
		if root != nil {
			line = root.Line
		}
		return nil, &FieldError{File: name, Line: line, Field: "domain", Msg: "config file cannot have empty domain"}
	}
	return f, nil
}

type parser struct{ file string }

func (p *parser) errf(n *yaml.Node, field, format string, args ...any) error {
	line := 0
	if n != nil {
		line = n.Line
	}
	return &FieldError{File: p.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// pairs yields a mapping node's keys and values.
func pairs(n *yaml.Node) iter.Seq2[*yaml.Node, *yaml.Node] {
	return func(yield func(k, v *yaml.Node) bool) {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if !yield(n.Content[i], n.Content[i+1]) {
				return
			}
		}
	}
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.AliasNode:
		return "alias"
	}
	return "scalar " + strconv.Quote(n.Value)
}

// checkKeys walks n as the original service does before it decodes: every
// mapping key a string among validKeys, every list of mappings, every
// scalar a string, whole number, boolean or null.
func (p *parser) checkKeys(n *yaml.Node, path string) error {
	switch n.Kind {
	case yaml.AliasNode:
		return p.checkKeys(n.Alias, path)
	case yaml.MappingNode:
		for k, v := range pairs(n) {
			if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
				return p.errf(k, path, "config error, key is not of type string: %s", k.Value)
			}
			sub := join(path, k.Value)
			if !validKeys[k.Value] {
				return p.errf(k, sub, "config error, unknown key '%s' (want one of %s)", k.Value, strings.Join(sortedKeys(), ", "))
			}
			if err := p.checkKeys(v, sub); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for i, e := range n.Content {
			sub := fmt.Sprintf("%s[%d]", path, i)
			if e.Kind != yaml.MappingNode {
				return p.errf(e, sub, "config error, yaml file contains list of type other than map: %s", e.Value)
			}
			if err := p.checkKeys(e, sub); err != nil {
				return err
			}
		}
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!str", "!!int", "!!bool", "!!null":
		default:
			return p.errf(n, path, "error checking config: %q is a %s, want a string, a whole number or a boolean", n.Value, strings.TrimPrefix(n.Tag, "!!"))
		}
	}
	return nil
}

func sortedKeys() []string { return slices.Sorted(maps.Keys(validKeys)) }

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func (p *parser) str(n *yaml.Node, field string) (string, error) {
	if isNull(n) {
		return "", nil
	}
	if n.Kind != yaml.ScalarNode {
		return "", p.errf(n, field, "want a string, found a %s", kindName(n))
	}
	return n.Value, nil
}

func (p *parser) boolean(n *yaml.Node, field string) (bool, error) {
	if isNull(n) {
		return false, nil
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		return false, p.errf(n, field, "want true or false, found %s", kindName(n))
	}
	var b bool
	if err := n.Decode(&b); err != nil {
		return false, p.errf(n, field, "want true or false: %v", err)
	}
	return b, nil
}

func (p *parser) descriptors(n *yaml.Node, path string) ([]descriptor, error) {
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, p.errf(n, path, "want a list of descriptors, found a %s", kindName(n))
	}
	out := make([]descriptor, 0, len(n.Content))
	for i, e := range n.Content {
		field := fmt.Sprintf("%s[%d]", path, i)
		d := descriptor{line: e.Line, field: field}
		for k, v := range pairs(e) {
			f := field + "." + k.Value
			var err error
			switch k.Value {
			case "key":
				d.key, err = p.str(v, f)
			case "value":
				d.value, err = p.str(v, f)
			case "descriptors":
				d.children, err = p.descriptors(v, f)
			case "rate_limit":
				d.limit, err = p.rateLimit(v, f)
			case "shadow_mode", "quota_mode", "detailed_metric", "value_to_metric", "share_threshold":
				var b bool
				b, err = p.boolean(v, f)
				d.setFlag(k.Value, b)
			default:
				err = p.errf(k, f, "not a field of a descriptor (want key, value, rate_limit, descriptors, shadow_mode, quota_mode, detailed_metric, value_to_metric or share_threshold)")
			}
			if err != nil {
				return nil, err
			}
		}
		out = append(out, d)
	}
	return out, nil
}

func (d *descriptor) setFlag(name string, b bool) {
	switch name {
	case "share_threshold":
		d.share = b
	case "shadow_mode":
		d.shadow = b
	case "quota_mode":
		d.quota = b
	case "detailed_metric":
		d.detailed = b
	}
}

func (p *parser) rateLimit(n *yaml.Node, path string) (*Limit, error) {
	if isNull(n) {
		return nil, nil // rate_limit: (null): the original decodes no limit
	}
	l := &Limit{File: p.file, Line: n.Line}
	if n.Kind != yaml.MappingNode {
		return nil, p.errf(n, path, "want a mapping with unit and requests_per_unit, found a %s", kindName(n))
	}
	var unit string
	var unitLine *yaml.Node
	for k, v := range pairs(n) {
		f := path + "." + k.Value
		var err error
		switch k.Value {
		case "unit":
			unit, err = p.str(v, f)
			unitLine = v
		case "requests_per_unit":
			if isNull(v) {
				break
			}
			u, perr := strconv.ParseUint(v.Value, 10, 32)
			if v.Kind != yaml.ScalarNode || perr != nil {
				err = p.errf(v, f, "%q: want a whole number from 0 to %d", v.Value, uint32(math.MaxUint32))
				break
			}
			l.RequestsPerUnit = uint32(u)
		case "unlimited":
			l.Unlimited, err = p.boolean(v, f)
		case "name":
			l.Name, err = p.str(v, f)
		case "replaces":
			l.Replaces, err = p.replaces(v, f)
		default:
			err = p.errf(k, f, "not a field of a rate_limit (want unit, requests_per_unit, unlimited, name or replaces)")
		}
		if err != nil {
			return nil, err
		}
	}
	if unitLine == nil {
		unitLine = n
	}
	_, valid := UnitPeriod(unit)
	switch {
	case l.Unlimited && valid:
		return nil, p.errf(unitLine, path+".unit", "should not specify rate limit unit when unlimited")
	case !l.Unlimited && !valid:
		return nil, p.errf(unitLine, path+".unit", "invalid rate limit unit '%s' (want second, minute, hour, day, week, month or year)", unit)
	}
	if !l.Unlimited {
		l.Unit = strings.ToUpper(unit)
		if r, b, ok := l.GCRA(); ok {
			if err := r.Validate(); err != nil {
				return nil, p.errf(n, path+".requests_per_unit", "%d per %s is more than allot enforces on one key (at most one unit per microsecond): %v", l.RequestsPerUnit, strings.ToLower(l.Unit), err)
			}
			if b > r.MaxBurst() {
				return nil, p.errf(n, path+".requests_per_unit", "%d per %s: a burst that large does not fit a key's window", l.RequestsPerUnit, strings.ToLower(l.Unit))
			}
		}
	}
	for i, r := range l.Replaces {
		f := fmt.Sprintf("%s.replaces[%d].name", path, i)
		if r == "" {
			return nil, p.errf(n, f, "should not have an empty replaces entry")
		}
		if r == l.Name {
			return nil, p.errf(n, f, "replaces should not contain name of same descriptor (%q)", r)
		}
	}
	return l, nil
}

func (p *parser) replaces(n *yaml.Node, path string) ([]string, error) {
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, p.errf(n, path, "want a list of {name: ...}, found a %s", kindName(n))
	}
	out := make([]string, 0, len(n.Content))
	for i, e := range n.Content {
		var name string
		for k, v := range pairs(e) {
			f := fmt.Sprintf("%s[%d].%s", path, i, k.Value)
			if k.Value != "name" {
				return nil, p.errf(k, f, "not a field of a replaces entry (want name)")
			}
			s, err := p.str(v, f)
			if err != nil {
				return nil, err
			}
			name = s
		}
		out = append(out, name)
	}
	return out, nil
}

// Config is a set of domains, built from files.
type Config struct {
	domains map[string]*node
	files   []string
	all     []*Limit
}

// Domains returns the domains, sorted.
func (c *Config) Domains() []string { return slices.Sorted(maps.Keys(c.domains)) }

// HasDomain reports whether the config holds domain.
func (c *Config) HasDomain(domain string) bool {
	_, ok := c.domains[domain]
	return ok
}

// Files returns the names of the files the config was built from.
func (c *Config) Files() []string { return c.files }

// Limit returns the limit at path (as Limit.Path names it), if any.
func (c *Config) Limit(path string) (*Limit, bool) {
	for _, l := range c.all {
		if l.Path == path {
			return l, true
		}
	}
	return nil, false
}

// Global marks a limit global: decided by allot's policy as a request of
// an allot tenant, so that it spends a budget the coordinator shares across
// regions (an entry of the ALLOT_GLOBAL_LIMITS file).
type Global struct {
	// Tenant is the allot tenant the limit's descriptors are decided as.
	Tenant string
	// Descriptors name, for a PerValue limit, the allot descriptor each of
	// its PerValueEntries is decided under, in path order; nil: each
	// entry's key. The tenant's policy shares each value under a global
	// limit keyed on tenant and these (policy.Resolved.KeyLimit).
	Descriptors []string
	// Where names the entry in errors (e.g. "global.yaml: global[0]"); ""
	// names it by its limit alone.
	Where string
}

// maxGlobalKeys caps the per-value entries of a global limit: with the
// tenant, the descriptors of one allot decision (at most 16).
const maxGlobalKeys = 15

// Errorf is an error about field (limit, tenant, descriptors…) of g, the
// entry that marks path global: "WHERE.FIELD: global limit \"PATH\": MSG".
func (g Global) Errorf(path, field, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if g.Where == "" {
		return fmt.Errorf("global limit %q: %s: %s", path, field, msg)
	}
	return fmt.Errorf("%s.%s: global limit %q: %s", g.Where, field, path, msg)
}

// CheckGlobal checks g, which marks the limit at path global, and returns
// the allot descriptor names its per-value entries are decided under
// (nil for a limit of one counter, which spends the tenant's budget as
// one). It refuses, naming the field: a limit not in the config or
// unlimited, an invalid tenant, and for a PerValue limit descriptor names
// allot would refuse (when Descriptors is nil: entry keys that are not
// such names), "tenant", a name twice, or not one name per entry; for a
// limit of one counter, any Descriptors.
func (c *Config) CheckGlobal(path string, g Global) ([]string, error) {
	l, ok := c.Limit(path)
	switch {
	case !ok:
		return nil, g.Errorf(path, "limit", "no such limit in the configuration (its paths: see /rlconfig or --check)")
	case l.Unlimited:
		return nil, g.Errorf(path, "limit", "unlimited, nothing to share")
	}
	if err := policy.ValidateTenant(g.Tenant); err != nil {
		return nil, g.Errorf(path, "tenant", "%v", err)
	}
	if !l.PerValue {
		if g.Descriptors != nil {
			return nil, g.Errorf(path, "descriptors", "the limit has one counter (exact values on its path), so no entry to name: leave descriptors out")
		}
		return nil, nil
	}
	keys := make([]string, len(l.PerValueEntries))
	for i, e := range l.PerValueEntries {
		keys[i] = e.Key
	}
	if len(keys) > maxGlobalKeys {
		return nil, g.Errorf(path, "limit", "%d entries counted per value (%s), at most %d", len(keys), strings.Join(keys, ", "), maxGlobalKeys)
	}
	names := g.Descriptors
	if names == nil {
		for i, k := range keys {
			if err := policy.ValidateDescriptor(k); err != nil || k == "tenant" {
				return nil, g.Errorf(path, "descriptors", "missing, and entry %d's key %q (counted per value) is not an allot descriptor name (lowercase letters, digits, '_' or '-', starting with a letter; not tenant): list the name of each of %s, e.g. descriptors: [%s]",
					i, k, strings.Join(keys, ", "), strings.Join(exampleNames(keys), ", "))
			}
		}
		names = keys
	} else if len(names) != len(keys) {
		return nil, g.Errorf(path, "descriptors", "%d names for the limit's %d entries counted per value (%s): want one name per entry, in path order", len(names), len(keys), strings.Join(keys, ", "))
	}
	if err := CheckDescriptorNames(names); err != nil {
		var ne *NameError
		if errors.As(err, &ne) && g.Descriptors != nil {
			return nil, g.Errorf(path, fmt.Sprintf("descriptors[%d]", ne.Index), "%s", ne.Msg)
		}
		return nil, g.Errorf(path, "descriptors", "missing, and the keys of the entries counted per value (%s) are not distinct descriptor names: list one name per entry, in path order", strings.Join(keys, ", "))
	}
	return slices.Clone(names), nil
}

// NameError is a descriptor name CheckDescriptorNames refuses.
type NameError struct {
	Index int // its position in the list
	Msg   string
}

func (e *NameError) Error() string { return fmt.Sprintf("descriptors[%d]: %s", e.Index, e.Msg) }

// CheckDescriptorNames checks the allot descriptor names of a global
// limit's per-value entries: each valid (policy.ValidateDescriptor), none
// "tenant" (the allot tenant is its own descriptor), none twice. Errors
// are *NameError.
func CheckDescriptorNames(names []string) error {
	for i, n := range names {
		switch err := policy.ValidateDescriptor(n); {
		case err != nil:
			return &NameError{Index: i, Msg: err.Error()}
		case n == "tenant":
			return &NameError{Index: i, Msg: `"tenant" names the allot tenant itself: pick another name`}
		case slices.Contains(names[:i], n):
			return &NameError{Index: i, Msg: fmt.Sprintf("%q is listed twice", n)}
		}
	}
	return nil
}

// exampleNames suggests allot descriptor names for entry keys: lower case,
// other characters as '_', a leading letter.
func exampleNames(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		b := []byte(strings.ToLower(k))
		for j, c := range b {
			switch {
			case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
			default:
				b[j] = '_'
			}
		}
		n := string(b)
		if n == "" || n[0] < 'a' || n[0] > 'z' || n == "tenant" {
			n = "k_" + n
		}
		if len(n) > 63 {
			n = n[:63]
		}
		out[i] = n
	}
	return out
}

// Limits returns how many rate limits the config holds.
func (c *Config) Limits() int { return len(c.all) }

// All returns the config's rate limits, in file order. The caller must
// not change them.
func (c *Config) All() []*Limit { return c.all }

// Build joins files into a Config. A domain in more than one file is an
// error unless merge is set (the original's MERGE_DOMAIN_CONFIG): its
// descriptors are then joined, and a key in two of them is still an error.
func Build(files []*File, merge bool) (*Config, error) {
	c := &Config{domains: map[string]*node{}}
	for _, f := range files {
		root, ok := c.domains[f.Domain]
		if ok && !merge {
			return nil, &FieldError{File: f.Name, Field: "domain", Msg: fmt.Sprintf("duplicate domain '%s' in config file (another file holds it; set MERGE_DOMAIN_CONFIG=true to merge them)", f.Domain)}
		}
		if !ok {
			root = newNode()
			c.domains[f.Domain] = root
		}
		if err := c.load(f, root, f.Domain+".", f.descs, 0, nil); err != nil {
			return nil, err
		}
		c.files = append(c.files, f.Name)
	}
	return c, nil
}

// load loads descs, the descriptors at depth (0: the domain's) of the
// path, under n; perValue are the entries above them counted per value.
func (c *Config) load(f *File, n *node, parent string, descs []descriptor, depth int, perValue []PerValueEntry) error {
	for _, d := range descs {
		if d.key == "" {
			return &FieldError{File: f.Name, Line: d.line, Field: d.field + ".key", Msg: "descriptor has empty key"}
		}
		k := d.key
		if d.value != "" {
			k += "_" + d.value
		}
		full := parent + k
		if _, dup := n.children[k]; dup {
			return &FieldError{File: f.Name, Line: d.line, Field: d.field + ".key", Msg: fmt.Sprintf("duplicate descriptor composite key '%s'", full)}
		}
		wild := strings.HasSuffix(k, "*")
		if d.share && !wild {
			return &FieldError{File: f.Name, Line: d.line, Field: d.field + ".share_threshold", Msg: fmt.Sprintf("share_threshold can only be used with wildcard values (ending with '*'), but found key '%s'", k)}
		}
		child := newNode()
		pv := perValue
		if d.value == "" || wild && !d.share {
			pv = append(slices.Clip(perValue), PerValueEntry{Index: depth, Key: d.key})
		}
		if l := d.limit; l != nil {
			l.Path, l.Shadow, l.Quota, l.DetailedMetric = full, d.shadow, d.quota, d.detailed
			l.PerValue, l.PerValueEntries = len(pv) > 0, pv
			child.limit = l
			c.all = append(c.all, l)
		}
		if d.share {
			child.share, child.pattern = true, k
		}
		if wild {
			n.wildcards = append(n.wildcards, k)
		}
		if err := c.load(f, child, full+".", d.children, depth+1, pv); err != nil {
			return err
		}
		n.children[k] = child
	}
	return nil
}

// Entry is one key and value of a request descriptor.
type Entry struct{ Key, Value string }

// Match is the limit a request descriptor is subject to.
type Match struct {
	Limit *Limit
	// Entries are the descriptor's entries as they name its counter: a
	// value matched by a share_threshold wildcard is replaced by the
	// wildcard, so that every value it matches shares one counter.
	Entries []Entry
}

// Match returns the limit of one request descriptor in domain, following
// the original service's rules (see the package doc); ok is false when no
// limit applies (unknown domain, no matching node, or a node without a
// limit at the descriptor's depth). It does not apply replaces (Replaced
// does, across a request's descriptors) and returns unlimited limits as
// they are.
func (c *Config) Match(domain string, entries []Entry) (Match, bool) {
	n := c.domains[domain]
	if n == nil || len(entries) == 0 {
		return Match{}, false
	}
	var found *Limit
	var shared []int // indexes of entries matched by share_threshold wildcards
	var patterns []string
	for i, e := range entries {
		kv := e.Key + "_" + e.Value
		next := n.children[kv]
		wild := false
		if next == nil {
			for _, w := range n.wildcards {
				if strings.HasPrefix(kv, strings.TrimSuffix(w, "*")) {
					next, wild = n.children[w], true
					break
				}
			}
		}
		if next == nil {
			next = n.children[e.Key]
		}
		if next == nil {
			break
		}
		if wild && next.share {
			shared = append(shared, i)
			patterns = append(patterns, strings.TrimPrefix(next.pattern, e.Key+"_"))
		}
		if next.limit != nil && i == len(entries)-1 {
			found = next.limit
		}
		if len(next.children) == 0 {
			break
		}
		n = next
	}
	if found == nil {
		return Match{}, false
	}
	m := Match{Limit: found, Entries: entries}
	if len(shared) > 0 {
		m.Entries = slices.Clone(entries)
		for j, i := range shared {
			m.Entries[i].Value = patterns[j]
		}
	}
	return m, true
}

// Replaced returns, for the limits of one request's descriptors (nil where
// none applies), which ones another limit of the request replaces: a limit
// whose name some limit (unlimited ones included) lists in its replaces.
// nil when none is.
func Replaced(limits []*Limit) []bool {
	var names []string
	for _, l := range limits {
		if l != nil {
			names = append(names, l.Replaces...)
		}
	}
	if len(names) == 0 {
		return nil
	}
	out := make([]bool, len(limits))
	some := false
	for i, l := range limits {
		if l != nil && l.Name != "" && slices.Contains(names, l.Name) {
			out[i], some = true, true
		}
	}
	if !some {
		return nil
	}
	return out
}

// Dump lists every limit, one per line in file order, as the original
// service's /rlconfig does: "<path>: unit=<UNIT> requests_per_unit=<N>,
// shadow_mode: <bool>, quota_mode: <bool>" (an unlimited limit shows
// unit=UNKNOWN requests_per_unit=0 and ", unlimited: true").
func (c *Config) Dump() string {
	var b strings.Builder
	for _, l := range c.all {
		unit := l.Unit
		if unit == "" {
			unit = "UNKNOWN"
		}
		fmt.Fprintf(&b, "%s: unit=%s requests_per_unit=%d, shadow_mode: %t, quota_mode: %t", l.Path, unit, l.RequestsPerUnit, l.Shadow, l.Quota)
		if l.Unlimited {
			b.WriteString(", unlimited: true")
		}
		b.WriteByte('\n')
	}
	return b.String()
}
