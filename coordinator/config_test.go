package coordinator

import (
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Validate checks the whole configuration, the allocator's included, so that
// a coordinator it accepts never fails at its first rebalance.
func TestConfigValidateAll(t *testing.T) {
	cases := []struct {
		name   string
		adjust func(*Config)
		field  string // "" = valid
		reason string
	}{
		{"defaults", func(*Config) {}, "", ""},
		{"tests' timings", func(c *Config) {
			c.SessionTTL, c.RebalanceInterval, c.Lease = 2*time.Second, 100*time.Millisecond, 5*time.Second
		}, "", ""},
		{"no etcd", func(c *Config) { c.Etcd = nil }, "Etcd", "required"},
		{"session ttl fraction", func(c *Config) { c.SessionTTL = 1500 * time.Millisecond }, "SessionTTL", "whole seconds"},
		{"zero interval", func(c *Config) { c.RebalanceInterval = 0 }, "RebalanceInterval", "positive"},
		{"lease within failover", func(c *Config) { c.Lease = 5 * time.Second }, "Lease", "SessionTTL + RebalanceInterval (5s)"},
		// The case: accepted before, then every rebalance failed.
		{"lease under two intervals", func(c *Config) {
			c.RebalanceInterval, c.SessionTTL, c.Lease = 5*time.Second, time.Second, 7*time.Second
		}, "Lease", "at least two RebalanceInterval (10s)"},
		{"allocator tunable", func(c *Config) { c.Shares.AlphaUp = 0 }, "Shares", "AlphaUp"},
		{"allocator deadband", func(c *Config) { c.Shares.Deadband = 0.9 }, "Shares", "Deadband"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Etcd = &clientv3.Client{} // only its presence is checked
			c.adjust(&cfg)
			err := cfg.Validate()
			if c.field == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != c.field || !strings.Contains(fe.Reason, c.reason) {
				t.Fatalf("Validate() = %v, want a *FieldError on %s saying %q", err, c.field, c.reason)
			}
			if _, err := New(cfg); err == nil {
				t.Errorf("New accepted what Validate refused")
			}
		})
	}
}
