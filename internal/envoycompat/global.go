package envoycompat

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"

	"github.com/allot-dev/allot/policy"
	"github.com/allot-dev/allot/policy/envoyconf"
)

// globalFile is the ALLOT_GLOBAL_LIMITS file:
//
//	global:
//	  - limit: edge.path_/api    # a limit's path, as /rlconfig lists it
//	    tenant: edge-api         # the allot tenant whose budget it spends
//	  - limit: edge.remote_address   # a limit counted per value
//	    tenant: edge-ip              # whose policy has a global limit per key
//	    descriptors: [remote_address] # optional: the allot descriptor of each
//	                                  # entry counted per value (default: its key)
type globalFile struct {
	Global []struct {
		Limit       string   `yaml:"limit"`
		Tenant      string   `yaml:"tenant"`
		Descriptors []string `yaml:"descriptors"`
	} `yaml:"global"`
}

// ParseGlobal reads an ALLOT_GLOBAL_LIMITS file into limit path → how it
// is global. name is how errors name the file (and each entry's Where
// names it and the entry, global[i], for the checks made later). Unknown
// fields, a missing limit or tenant, an invalid tenant name, a limit named
// twice, and descriptors that are empty, invalid allot descriptor names,
// "tenant" or a name twice are errors. Whether each limit exists and can
// be global, and descriptors fit its entries counted per value, is
// checked when a configuration is applied (envoyconf.Config.CheckGlobal,
// regional.EnvoyOptions.Global).
func ParseGlobal(name string, data []byte) (map[string]envoyconf.Global, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f globalFile
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	out := make(map[string]envoyconf.Global, len(f.Global))
	for i, g := range f.Global {
		switch {
		case g.Limit == "":
			return nil, fmt.Errorf("%s: global[%d].limit: missing: want a limit's path, e.g. edge.path_/api", name, i)
		case g.Tenant == "":
			return nil, fmt.Errorf("%s: global[%d].tenant: missing: want the allot tenant whose budget %s spends", name, i, g.Limit)
		case g.Descriptors != nil && len(g.Descriptors) == 0:
			return nil, fmt.Errorf("%s: global[%d].descriptors: empty: list the allot descriptor name of each entry %s counts per value, or leave it out", name, i, g.Limit)
		}
		if err := policy.ValidateTenant(g.Tenant); err != nil {
			return nil, fmt.Errorf("%s: global[%d].tenant: %w", name, i, err)
		}
		var ne *envoyconf.NameError
		if err := envoyconf.CheckDescriptorNames(g.Descriptors); errors.As(err, &ne) {
			return nil, fmt.Errorf("%s: global[%d].descriptors[%d]: %s", name, i, ne.Index, ne.Msg)
		}
		if _, dup := out[g.Limit]; dup {
			return nil, fmt.Errorf("%s: global[%d].limit: %s is named twice", name, i, g.Limit)
		}
		out[g.Limit] = envoyconf.Global{Tenant: g.Tenant, Descriptors: g.Descriptors, Where: fmt.Sprintf("%s: global[%d]", name, i)}
	}
	return out, nil
}
