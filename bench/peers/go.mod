module github.com/allot-dev/allot/bench/peers

go 1.26.0

replace github.com/allot-dev/allot => ../..

require (
	github.com/allot-dev/allot v0.0.0-00010101000000-000000000000
	github.com/go-redis/redis_rate/v10 v10.0.1
	github.com/redis/go-redis/v9 v9.23.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
