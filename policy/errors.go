package policy

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalid is wrapped by every validation error, for errors.Is.
var ErrInvalid = errors.New("invalid policy")

// FieldError is one problem with one field of a document.
type FieldError struct {
	// Path is the field, e.g. "limits[1].rate" or "tenants.t42.budget.home".
	Path string
	// Line is the 1-based line of the field in the parsed text (0 when the
	// document was not parsed from text).
	Line int
	// Msg says what is wrong and what is expected.
	Msg string
}

func (e *FieldError) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *FieldError) Unwrap() error { return ErrInvalid }

// Errors is every problem found in one document, in document order.
type Errors []*FieldError

func (es Errors) Error() string {
	if len(es) == 1 {
		return es[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d problems:", len(es))
	for _, e := range es {
		b.WriteString("\n  ")
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap returns the individual errors.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// collector gathers field errors during validation.
type collector struct {
	errs  Errors
	lines map[string]int // field path → line, when parsed from text
}

func (c *collector) addf(path, format string, args ...any) {
	c.errs = append(c.errs, &FieldError{Path: path, Line: c.line(path), Msg: fmt.Sprintf(format, args...)})
}

// line finds the line of path, or of its nearest parent that has one.
func (c *collector) line(path string) int {
	for p := path; p != ""; p = parent(p) {
		if l, ok := c.lines[p]; ok {
			return l
		}
	}
	return 0
}

func parent(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i <= 0 {
		return ""
	}
	return path[:i]
}

func (c *collector) err() error {
	if len(c.errs) == 0 {
		return nil
	}
	return c.errs
}
