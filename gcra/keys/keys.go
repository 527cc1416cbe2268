package keys

import (
	"errors"
	"fmt"
	"strings"
)

// Prefix and Version open every key.
const (
	Prefix  = "allot"
	Version = "v1"
)

const head = Prefix + ":" + Version + ":{"

// Sentinel errors.
var (
	ErrTenant = errors.New("keys: tenant must not be empty")
	ErrLimit  = errors.New("keys: limit name must not be empty")
	ErrSyntax = errors.New("keys: not an allot v1 key")
)

// Descriptor is one request attribute of a limit's key, such as user=7.
type Descriptor struct {
	Name  string
	Value string
}

// Parts is what a key is made of.
type Parts struct {
	Tenant      string
	Limit       string
	Descriptors []Descriptor
}

// Key returns the key of limit for tenant and the descriptors, in the order
// given (sort them first if the caller's order is not meaningful). Tenant
// and limit must not be empty; descriptor names and values may be.
func Key(tenant, limit string, ds ...Descriptor) (string, error) {
	if tenant == "" {
		return "", ErrTenant
	}
	if limit == "" {
		return "", ErrLimit
	}
	var b strings.Builder
	n := len(head) + len(tenant) + len(limit) + 2
	for _, d := range ds {
		n += len(d.Name) + len(d.Value) + 2
	}
	b.Grow(n)
	b.WriteString(head)
	escape(&b, tenant)
	b.WriteString("}:")
	escape(&b, limit)
	for _, d := range ds {
		b.WriteByte(':')
		escape(&b, d.Name)
		b.WriteByte('=')
		escape(&b, d.Value)
	}
	return b.String(), nil
}

// HashTag returns the Redis Cluster hash tag of tenant's keys, braces
// included: every key Key builds for tenant contains it, and Redis hashes
// only what is inside it.
func HashTag(tenant string) string {
	var b strings.Builder
	b.WriteByte('{')
	escape(&b, tenant)
	b.WriteByte('}')
	return b.String()
}

// Escape returns s with every byte outside A–Z, a–z, 0–9 and "-._~" written
// as %XX.
func Escape(s string) string {
	var b strings.Builder
	escape(&b, s)
	return b.String()
}

// Unescape inverts Escape. It rejects anything Escape cannot produce.
func Unescape(s string) (string, error) {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case unreserved(c):
			b.WriteByte(c)
		case c == '%' && i+2 < len(s) && isUpperHex(s[i+1]) && isUpperHex(s[i+2]):
			v := unhex(s[i+1])<<4 | unhex(s[i+2])
			if unreserved(v) {
				return "", fmt.Errorf("%w: %q escapes an unreserved byte", ErrSyntax, s)
			}
			b.WriteByte(v)
			i += 2
		default:
			return "", fmt.Errorf("%w: %q has a raw or malformed byte at %d", ErrSyntax, s, i)
		}
	}
	return b.String(), nil
}

// Parse inverts Key.
func Parse(key string) (Parts, error) {
	rest, ok := strings.CutPrefix(key, head)
	if !ok {
		return Parts{}, fmt.Errorf("%w: %q lacks the prefix %q", ErrSyntax, key, head)
	}
	tag, rest, ok := strings.Cut(rest, "}:")
	if !ok {
		return Parts{}, fmt.Errorf("%w: %q: unterminated hash tag", ErrSyntax, key)
	}
	var p Parts
	var err error
	if p.Tenant, err = Unescape(tag); err != nil {
		return Parts{}, err
	}
	fields := strings.Split(rest, ":")
	if p.Limit, err = Unescape(fields[0]); err != nil {
		return Parts{}, err
	}
	if p.Tenant == "" || p.Limit == "" {
		return Parts{}, fmt.Errorf("%w: %q: empty tenant or limit", ErrSyntax, key)
	}
	for _, f := range fields[1:] {
		name, value, ok := strings.Cut(f, "=")
		if !ok {
			return Parts{}, fmt.Errorf("%w: %q: descriptor %q lacks '='", ErrSyntax, key, f)
		}
		var d Descriptor
		if d.Name, err = Unescape(name); err != nil {
			return Parts{}, err
		}
		if d.Value, err = Unescape(value); err != nil {
			return Parts{}, err
		}
		p.Descriptors = append(p.Descriptors, d)
	}
	return p, nil
}

const hexDigits = "0123456789ABCDEF"

func escape(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if unreserved(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
}

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

func isUpperHex(c byte) bool { return '0' <= c && c <= '9' || 'A' <= c && c <= 'F' }

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'A' + 10
}

// SettleKey returns the key of a reservation of tenant's (reserve, then
// settle: gcra.Reservation) named id, in the slot of the tenant's limit
// keys. Its segment after the hash tag starts with '#', which no limit key
// holds (Key escapes it), so it never names a limit's state. id must be
// non-empty and unreserved characters only.
func SettleKey(tenant, id string) (string, error) {
	if tenant == "" {
		return "", ErrTenant
	}
	if id == "" {
		return "", fmt.Errorf("%w: empty reservation id", ErrSyntax)
	}
	for i := 0; i < len(id); i++ {
		if !unreserved(id[i]) {
			return "", fmt.Errorf("%w: reservation id %q", ErrSyntax, id)
		}
	}
	var b strings.Builder
	b.WriteString(head)
	escape(&b, tenant)
	b.WriteString("}:#settle:")
	b.WriteString(id)
	return b.String(), nil
}
