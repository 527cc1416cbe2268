package main

import (
	"cmp"
	"errors"
	"slices"
	"strings"

	"github.com/allot-dev/allot/coordinator"
)

// coordinatorFlags names the flag that sets each coordinator.Config field
// (allot coordinator; allot dev sets only RebalanceInterval).
var coordinatorFlags = map[string]string{
	"SessionTTL":        "--session-ttl",
	"RebalanceInterval": "--rebalance-interval",
	"Lease":             "--lease",
	"TenantIdleTimeout": "--tenant-idle-timeout",
	"MaxTenants":        "--max-tenants",
	"Shard":             "--shard",
	"Shards":            "--shards",
}

// flagError turns a *coordinator.FieldError about a field that a flag sets
// into a usage error in the flags' terms: "--lease 7s: must be at least two
// --rebalance-interval (10s)". Any other error becomes a usage error as it
// is.
func flagError(err error, flags map[string]string) error {
	if err == nil {
		return nil
	}
	var fe *coordinator.FieldError
	if !errors.As(err, &fe) {
		return usageError{err}
	}
	flag, ok := flags[fe.Field]
	if !ok {
		return usageError{err}
	}
	// Longest names first, so that no name is replaced inside another.
	fields := make([]string, 0, len(flags))
	for f := range flags {
		fields = append(fields, f)
	}
	slices.SortFunc(fields, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	var pairs []string
	for _, f := range fields {
		pairs = append(pairs, f, flags[f])
	}
	reason := strings.NewReplacer(pairs...).Replace(fe.Reason)
	if fe.Value == nil {
		return usagef("%s: %s", flag, reason)
	}
	return usagef("%s %v: %s", flag, fe.Value, reason)
}
