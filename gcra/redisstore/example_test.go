package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/gcra"
	"github.com/allot-dev/allot/gcra/keys"
	"github.com/allot-dev/allot/gcra/redisstore"
)

// New insists on a client that honours its calls' context deadlines: a
// store call must end when its timeout does.
func ExampleNew() {
	plain := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer plain.Close()
	_, err := redisstore.New(plain)
	fmt.Println(errors.Is(err, redisstore.ErrContextTimeoutDisabled))

	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer c.Close()
	_, err = redisstore.New(c) // no round trip yet
	fmt.Println(err)
	// Output:
	// true
	// <nil>
}

// One decision against a Redis at 127.0.0.1:6379 (not run: it needs a
// server): 1000 units a second, burst 200, on a key built by gcra/keys, so
// that a tenant's keys share a Redis Cluster slot. A failure is an *Error
// that a failure policy branches on with errors.Is.
func ExampleStore_Decide() {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer c.Close()
	st, err := redisstore.New(c)
	if err != nil {
		fmt.Println(err)
		return
	}
	limit, err := gcra.FromPerSecond(1000, 200)
	if err != nil {
		fmt.Println(err)
		return
	}
	key, err := keys.Key("t42", "tenant")
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	d, err := st.Decide(ctx, []gcra.Request{{Key: key, Limit: limit, Cost: 1}})
	switch {
	case errors.Is(err, redisstore.ErrTimeout), errors.Is(err, redisstore.ErrUnavailable):
		fmt.Println("Redis is slow or down: apply the limit's failure policy")
	case err != nil:
		fmt.Println(err)
	default:
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	}
}

// Requests are validated before they reach Redis, so a malformed decision
// fails without a round trip (here nothing listens on the address).
func ExampleStore_Decide_validation() {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer c.Close()
	st, err := redisstore.New(c)
	if err != nil {
		fmt.Println(err)
		return
	}
	limit, err := gcra.FromPerSecond(1000, 200)
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = st.Decide(context.Background(), []gcra.Request{{Key: "", Limit: limit, Cost: 1}})
	fmt.Println(err)
	_, err = st.Decide(context.Background(), []gcra.Request{{Key: "k", Limit: limit, Cost: 201}})
	fmt.Println(err)
	// Output:
	// limit 0: gcra: key must not be empty
	// limit 0: gcra: cost exceeds burst and can never conform
}
