package ratelimitfields_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/allot-dev/allot/ratelimitfields"
)

func ExampleSet() {
	h := http.Header{}
	ratelimitfields.Set(h, ratelimitfields.Decision{
		Allowed: false, RetryAfter: 1500 * time.Millisecond,
		Limit: "tenant", Quota: 1000, Window: time.Second,
	})
	fmt.Println(h.Get("RateLimit-Policy"))
	fmt.Println(h.Get("RateLimit"))
	fmt.Println(ratelimitfields.RetryAfter(1500 * time.Millisecond))
	// Output:
	// "tenant";q=1000;w=1
	// "tenant";r=0;t=2
	// 2
}

func ExampleValues() {
	// A limit whose name is no Structured Field String sets nothing.
	_, _, ok := ratelimitfields.Values(ratelimitfields.Decision{Allowed: true, Limit: "lïmit", Quota: 5, Window: time.Minute})
	fmt.Println(ok)
	// Output: false
}
