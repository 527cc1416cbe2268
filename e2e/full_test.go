//go:build e2e

package e2e

// The e2e build tag (`make e2e`) runs the full suite.
func init() { full = true }
