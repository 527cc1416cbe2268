package regional_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/allot-dev/allot/gcra/memstore"
	"github.com/allot-dev/allot/regional"
)

// A pod's configuration starts from DefaultConfig; Validate (which New
// runs) names the first field that is missing or out of range.
func ExampleConfig_Validate() {
	cfg := regional.DefaultConfig()
	fmt.Println(cfg.Validate())

	cfg.Region = "eu-west"
	fmt.Println(cfg.Validate())

	store, err := memstore.New(memstore.DefaultConfig())
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg.Store = store
	cfg.SettleTTL = 48 * time.Hour
	fmt.Println(cfg.Validate())

	cfg.SettleTTL = time.Hour
	fmt.Println(cfg.Validate())
	// Output:
	// regional config: Region: required
	// regional config: Store: required
	// regional config: SettleTTL: 48h0m0s: want 1s to 24h
	// <nil>
}

// A front end maps Decide's errors with HTTPStatus (and GRPCError): a
// malformed request is the caller's fault, a pod without a policy is not
// ready yet, and anything else is the pod's own failure.
func ExampleHTTPStatus() {
	bad := fmt.Errorf("%w: cost: must be positive", regional.ErrBadRequest)
	for _, err := range []error{bad, regional.ErrNotReady, errors.New("redis: connection refused")} {
		fmt.Println(regional.HTTPStatus(err), regional.GRPCError(err))
	}
	// Output:
	// 400 rpc error: code = InvalidArgument desc = bad request: cost: must be positive
	// 503 rpc error: code = Unavailable desc = not ready: no policy loaded yet
	// 500 rpc error: code = Internal desc = redis: connection refused
}
