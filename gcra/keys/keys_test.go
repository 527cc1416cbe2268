package keys

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// redisHashTag is Redis Cluster's rule: the bytes between the first '{' and
// the first '}' after it, if that is not empty; otherwise the whole key.
func redisHashTag(key string) string {
	s := strings.IndexByte(key, '{')
	if s < 0 {
		return key
	}
	e := strings.IndexByte(key[s+1:], '}')
	if e <= 0 {
		return key
	}
	return key[s+1 : s+1+e]
}

func TestKey(t *testing.T) {
	cases := []struct {
		tenant, limit string
		ds            []Descriptor
		want          string
	}{
		{"t42", "tenant", nil, "allot:v1:{t42}:tenant"},
		{"t42", "user", []Descriptor{{"user", "7"}}, "allot:v1:{t42}:user:user=7"},
		{"t{1}", "l", nil, "allot:v1:{t%7B1%7D}:l"},
		{"a:b", "c=d", []Descriptor{{"x:y", "1=2"}}, "allot:v1:{a%3Ab}:c%3Dd:x%3Ay=1%3D2"},
		{"50%", "l", []Descriptor{{"", ""}}, "allot:v1:{50%25}:l:="},
		{"é", "l", []Descriptor{{"k", "a b\n"}}, "allot:v1:{%C3%A9}:l:k=a%20b%0A"},
	}
	for _, c := range cases {
		got, err := Key(c.tenant, c.limit, c.ds...)
		if err != nil || got != c.want {
			t.Errorf("Key(%q, %q, %v) = %q, %v; want %q", c.tenant, c.limit, c.ds, got, err, c.want)
			continue
		}
		p, err := Parse(got)
		if err != nil {
			t.Errorf("Parse(%q) = %v", got, err)
			continue
		}
		want := Parts{c.tenant, c.limit, c.ds}
		if !reflect.DeepEqual(p, want) {
			t.Errorf("Parse(%q) = %+v, want %+v", got, p, want)
		}
	}
}

func TestKeyErrors(t *testing.T) {
	if _, err := Key("", "l"); !errors.Is(err, ErrTenant) {
		t.Errorf("Key(\"\", l) = %v, want ErrTenant", err)
	}
	if _, err := Key("t", ""); !errors.Is(err, ErrLimit) {
		t.Errorf("Key(t, \"\") = %v, want ErrLimit", err)
	}
	for _, bad := range []string{
		"", "rl:{t}:x", "allot:v2:{t}:l", "allot:v1:{t:l", "allot:v1:{}:l", "allot:v1:{t}:",
		"allot:v1:{t}:l:noeq", "allot:v1:{t}:l:a=%zz", "allot:v1:{t}:l:a=%41", "allot:v1:{t}:l:a=%3a",
		"allot:v1:{t}:l:a=b c",
	} {
		if _, err := Parse(bad); !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%q) = %v, want ErrSyntax", bad, err)
		}
	}
}

// FuzzKey: every key parses back to its inputs (so distinct inputs give
// distinct keys), and its Redis hash tag is exactly the escaped tenant.
func FuzzKey(f *testing.F) {
	f.Add("t42", "tenant", "user", "7", "", "")
	f.Add("{", "}", ":", "=", "%", "\x00")
	f.Add("a}b{c", "x", "{y}", "}{", "é", "\xff")
	f.Fuzz(func(t *testing.T, tenant, limit, n1, v1, n2, v2 string) {
		ds := []Descriptor{{n1, v1}, {n2, v2}}
		key, err := Key(tenant, limit, ds...)
		if tenant == "" || limit == "" {
			if err == nil {
				t.Fatalf("Key(%q, %q) accepted an empty part", tenant, limit)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p, err := Parse(key)
		if err != nil {
			t.Fatalf("Parse(%q) = %v", key, err)
		}
		if want := (Parts{tenant, limit, ds}); !reflect.DeepEqual(p, want) {
			t.Fatalf("Parse(Key(%+v)) = %+v", want, p)
		}
		if got, want := redisHashTag(key), Escape(tenant); got != want {
			t.Fatalf("hash tag of %q = %q, want %q", key, got, want)
		}
		if !strings.Contains(key, HashTag(tenant)) {
			t.Fatalf("key %q lacks HashTag %q", key, HashTag(tenant))
		}
		for i := 0; i < len(key); i++ {
			if c := key[i]; c < 0x21 || c > 0x7e {
				t.Fatalf("key %q has a raw byte %#x", key, c)
			}
		}
	})
}

// FuzzDistinct: two inputs give the same key only if they are the same.
func FuzzDistinct(f *testing.F) {
	f.Add("t", "l", "a", "b", "t", "l", "a", "b")
	f.Add("t:l", "x", "", "", "t", "l:x", "", "")
	f.Add("t", "l", "a=b", "", "t", "l", "a", "b")
	f.Fuzz(func(t *testing.T, t1, l1, n1, v1, t2, l2, n2, v2 string) {
		k1, e1 := Key(t1, l1, Descriptor{n1, v1})
		k2, e2 := Key(t2, l2, Descriptor{n2, v2})
		if e1 != nil || e2 != nil {
			return
		}
		same := t1 == t2 && l1 == l2 && n1 == n2 && v1 == v2
		if (k1 == k2) != same {
			t.Fatalf("Key(%q,%q,%q=%q) = %q and Key(%q,%q,%q=%q) = %q", t1, l1, n1, v1, k1, t2, l2, n2, v2, k2)
		}
	})
}
