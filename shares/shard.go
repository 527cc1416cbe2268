package shares

// ShardOf returns the coordinator shard of tenant among n shards: FNV-1a
// (64 bit) of the tenant's name, modulo n. It is stable across processes,
// releases and platforms, since every pod and every coordinator of a
// cluster must place a tenant alike. n ≤ 1 gives 0.
func ShardOf(tenant string, n int) int {
	if n <= 1 {
		return 0
	}
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
	)
	h := uint64(offset64)
	for i := 0; i < len(tenant); i++ {
		h ^= uint64(tenant[i])
		h *= prime64
	}
	return int(h % uint64(n))
}
