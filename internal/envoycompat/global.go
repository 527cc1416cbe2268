package envoycompat

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"

	"github.com/allot-dev/allot/policy"
)

// globalFile is the ALLOT_GLOBAL_LIMITS file:
//
//	global:
//	  - limit: edge.path_/api    # a limit's path, as /rlconfig lists it
//	    tenant: edge-api         # the allot tenant whose budget it spends
type globalFile struct {
	Global []struct {
		Limit  string `yaml:"limit"`
		Tenant string `yaml:"tenant"`
	} `yaml:"global"`
}

// ParseGlobal reads an ALLOT_GLOBAL_LIMITS file into limit path → tenant.
// name is how errors name the file. Unknown fields, a missing limit or
// tenant, an invalid tenant name and a limit named twice are errors.
// Whether each limit exists and can be global is checked when a
// configuration is applied (regional.EnvoyOptions.Global).
func ParseGlobal(name string, data []byte) (map[string]string, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f globalFile
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	out := make(map[string]string, len(f.Global))
	for i, g := range f.Global {
		switch {
		case g.Limit == "":
			return nil, fmt.Errorf("%s: global[%d].limit: missing: want a limit's path, e.g. edge.path_/api", name, i)
		case g.Tenant == "":
			return nil, fmt.Errorf("%s: global[%d].tenant: missing: want the allot tenant whose budget %s spends", name, i, g.Limit)
		}
		if err := policy.ValidateTenant(g.Tenant); err != nil {
			return nil, fmt.Errorf("%s: global[%d].tenant: %w", name, i, err)
		}
		if _, dup := out[g.Limit]; dup {
			return nil, fmt.Errorf("%s: global[%d].limit: %s is named twice", name, i, g.Limit)
		}
		out[g.Limit] = g.Tenant
	}
	return out, nil
}
