package shares

import (
	"fmt"
	"hash/fnv"
	"testing"
)

func TestShardOf(t *testing.T) {
	// Pinned values: a change of the hash would move tenants between the
	// shards of a running cluster.
	for _, tc := range []struct {
		tenant string
		n      int
		want   int
	}{
		{"t42", 1, 0},
		{"t42", 0, 0},
		{"", 4, int(14695981039346656037 % 4)},
		{"acme", 2, shardByStdlib("acme", 2)},
		{"acme", 4, shardByStdlib("acme", 4)},
		{"tenant-00017", 7, shardByStdlib("tenant-00017", 7)},
	} {
		if got := ShardOf(tc.tenant, tc.n); got != tc.want {
			t.Errorf("ShardOf(%q, %d) = %d, want %d", tc.tenant, tc.n, got, tc.want)
		}
	}
}

func shardByStdlib(tenant string, n int) int {
	h := fnv.New64a()
	_, _ = h.Write([]byte(tenant))
	return int(h.Sum64() % uint64(n))
}

// Tenants spread evenly: with 4 shards and 10,000 tenants named as
// operators name them, every shard holds within 10% of a quarter.
func TestShardOfSpreads(t *testing.T) {
	for _, n := range []int{2, 4, 16} {
		counts := make([]int, n)
		const tenants = 10_000
		for i := range tenants {
			counts[ShardOf(fmt.Sprintf("tenant-%d", i), n)]++
		}
		want := tenants / n
		for s, c := range counts {
			if c < want*9/10 || c > want*11/10 {
				t.Errorf("n=%d: shard %d holds %d tenants, want %d ± 10%%", n, s, c, want)
			}
		}
	}
}

func FuzzShardOf(f *testing.F) {
	f.Add("t42", 4)
	f.Add("", 1)
	f.Fuzz(func(t *testing.T, tenant string, n int) {
		n = n%300 + 1
		if n < 1 {
			n = -n + 1
		}
		got := ShardOf(tenant, n)
		if got < 0 || got >= n {
			t.Fatalf("ShardOf(%q, %d) = %d, out of range", tenant, n, got)
		}
		if n > 1 && got != shardByStdlib(tenant, n) {
			t.Fatalf("ShardOf(%q, %d) = %d, stdlib FNV-1a says %d", tenant, n, got, shardByStdlib(tenant, n))
		}
	})
}

func ExampleShardOf() {
	fmt.Println(ShardOf("acme", 1), ShardOf("acme", 4))
	// Output: 0 3
}

// BenchmarkShardOf is what placing a tenant costs: a pod does it once per
// tenant (its tenant cache keeps the shard), a shard's leader once per
// tenant of every report it takes.
func BenchmarkShardOf(b *testing.B) {
	names := make([]string, 1024)
	for i := range names {
		names[i] = fmt.Sprintf("tenant-%08d", i)
	}
	b.ResetTimer()
	s := 0
	for i := 0; i < b.N; i++ {
		s += ShardOf(names[i&1023], 8)
	}
	_ = s
}
