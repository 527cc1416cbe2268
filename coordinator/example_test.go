package coordinator_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/allot-dev/allot/coordinator"
)

// ValidateSettings checks a coordinator's settings before anything is
// dialled (Validate adds the etcd client): the lease must outlive an
// election session and a rebalance, so that a new leader never grants
// units a pod may still hold. A problem is a *FieldError naming the field.
func ExampleConfig_ValidateSettings() {
	cfg := coordinator.DefaultConfig()
	fmt.Println(cfg.ValidateSettings())

	cfg.Lease = cfg.SessionTTL
	err := cfg.ValidateSettings()
	fmt.Println(err)
	var fe *coordinator.FieldError
	if errors.As(err, &fe) {
		fmt.Println("field:", fe.Field)
	}

	cfg = coordinator.DefaultConfig()
	cfg.Shards, cfg.Shard = 2, 2
	fmt.Println(cfg.ValidateSettings())

	cfg.Shard = 1
	cfg.SessionTTL = 1500 * time.Millisecond
	fmt.Println(cfg.ValidateSettings())

	fmt.Println(coordinator.DefaultConfig().Validate())
	// Output:
	// <nil>
	// coordinator config: Lease: 3s: must exceed SessionTTL + RebalanceInterval (5s)
	// field: Lease
	// coordinator config: Shard: 2: must be below Shards (2): shards are numbered from 0
	// coordinator config: SessionTTL: 1.5s: want whole seconds, at least 1s
	// coordinator config: Etcd: required
}
