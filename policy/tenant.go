package policy

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/allot-dev/allot/shares"
)

// MaxTenantLen bounds a tenant identifier, in bytes.
const MaxTenantLen = 256

// ErrTenant is wrapped by every error of ValidateTenant, for errors.Is.
var ErrTenant = errors.New("invalid tenant name")

// TenantError is a tenant name that ValidateTenant refuses, and the rule it
// breaks.
type TenantError struct {
	Name string
	Rule string
}

func (e *TenantError) Error() string {
	name := e.Name
	if len(name) > 64 {
		name = name[:64] + "…"
	}
	return fmt.Sprintf("tenant %q: %s", name, e.Rule)
}

// Unwrap makes errors.Is(err, ErrTenant) true.
func (e *TenantError) Unwrap() error { return ErrTenant }

// ValidateTenant checks a tenant name wherever one enters allot (admin API
// paths, policy tenants, decide descriptors, reports): 1 to MaxTenantLen
// bytes of valid UTF-8, every character printable (letters, digits, marks,
// punctuation, symbols) and none of whitespace, control or format
// characters, '/', '\', '{', '}' (they would read as path elements or break
// the hash tag {tenant} of Redis keys), and no "..". ASCII letters, digits
// and "-_.:@+=~%!#$&*|,;^'()[]<>?" are all fine, and so are letters of any
// script. Errors are *TenantError naming the rule.
func ValidateTenant(name string) error {
	bad := func(rule string, args ...any) error {
		return &TenantError{Name: name, Rule: fmt.Sprintf(rule, args...)}
	}
	switch {
	case name == "":
		return bad("empty: want 1 to %d bytes", MaxTenantLen)
	case len(name) > MaxTenantLen:
		return bad("%d bytes, at most %d", len(name), MaxTenantLen)
	case name == ".":
		return bad(`"." is a path element, not a name`)
	case strings.Contains(name, ".."):
		return bad(`contains "..": a path element`)
	}
	for i, r := range name {
		switch {
		case r == utf8.RuneError:
			if _, size := utf8.DecodeRuneInString(name[i:]); size == 1 {
				return bad("byte %d is not valid UTF-8", i)
			}
			return bad("contains U+FFFD, the replacement character, at byte %d", i)
		case r == '/' || r == '\\':
			return bad("contains %q at byte %d: path separators are not allowed", r, i)
		case r == '{' || r == '}':
			return bad("contains %q at byte %d: braces would break the Redis hash tag {tenant}", r, i)
		case unicode.IsSpace(r):
			return bad("contains whitespace (%U) at byte %d", r, i)
		case !unicode.IsPrint(r):
			return bad("contains a non-printable character (%U) at byte %d", r, i)
		}
	}
	return nil
}

// ValidateDescriptor checks a descriptor's name as a limit's descriptors
// list it: 1 to 63 lowercase letters, digits, '_' or '-', starting with a
// letter.
func ValidateDescriptor(name string) error {
	if !descriptorRE.MatchString(name) {
		return fmt.Errorf("descriptor %q: want 1 to 63 lowercase letters, digits, '_' or '-', starting with a letter", name)
	}
	return nil
}

// ValidTenant is ValidateTenant, under the name its first callers use.
func ValidTenant(id string) error { return ValidateTenant(id) }

// maxKeyLen bounds the key part of a key's share ID: its escaped values.
const maxKeyLen = 4096

// keyRE: query-escaped values, comma-separated.
var keyRE = regexp.MustCompile(`^[A-Za-z0-9%._~+,*'()!-]*$`)

// ValidateBudgetID checks the ID of one of a tenant's budgets as the
// protocol carries it (shares.BudgetID): a tenant name, or tenant/NAME with
// NAME a valid budget name.
func ValidateBudgetID(id string) error {
	tenant, name := shares.SplitBudgetID(id)
	if err := ValidateTenant(tenant); err != nil {
		return err
	}
	if lim, key, keyed := strings.Cut(name, "="); keyed {
		// A key's share of a global limit (shares.KeyBudgetID).
		if !nameRE.MatchString(lim) || len(key) > maxKeyLen || !keyRE.MatchString(key) {
			return &TenantError{Name: id, Rule: "not a key of a global limit: want LIMIT=V1,V2 with the values query-escaped"}
		}
		return nil
	}
	if strings.Contains(id, "/") && !budgetNameRE.MatchString(name) {
		return &TenantError{Name: id, Rule: fmt.Sprintf("budget name %q: want lowercase letters, digits, '_' or '-'", name)}
	}
	return nil
}
