package redisstore

import (
	"errors"
	"testing"
	"time"
)

func TestDecode(t *testing.T) {
	good := []struct {
		v        any
		n        int
		allowed  bool
		limiting int
	}{
		{[]any{int64(1), int64(0), int64(2), int64(200_000)}, 1, true, 0},
		{[]any{int64(0), int64(5), int64(0), int64(9)}, 1, false, 0},
		{[]any{int64(0), int64(5), int64(0), int64(9), int64(2)}, 2, false, 1},
	}
	for _, g := range good {
		d, err := decode(g.v, g.n)
		if err != nil || d.Allowed != g.allowed || d.Limiting != g.limiting {
			t.Errorf("decode(%v, %d) = %+v, %v", g.v, g.n, d, err)
		}
	}
	if d, _ := decode(good[0].v, 1); d.ResetAfter != 200*time.Millisecond || d.Remaining != 2 {
		t.Errorf("decode = %+v, want reset 200ms, remaining 2", d)
	}
	bad := []struct {
		name string
		v    any
		n    int
	}{
		{"not an array", "OK", 1},
		{"nil", nil, 1},
		{"short", []any{int64(1), int64(0), int64(2)}, 1},
		{"single with a fifth element", []any{int64(1), int64(0), int64(2), int64(3), int64(1)}, 1},
		{"composite without limiting", []any{int64(1), int64(0), int64(2), int64(3)}, 2},
		{"string element", []any{int64(1), "0", int64(2), int64(3)}, 1},
		{"negative", []any{int64(1), int64(0), int64(-1), int64(3)}, 1},
		{"allowed is 2", []any{int64(2), int64(0), int64(0), int64(3)}, 1},
		{"allowed with retry", []any{int64(1), int64(7), int64(0), int64(3)}, 1},
		{"denied without retry", []any{int64(0), int64(0), int64(0), int64(3)}, 1},
		{"limiting zero", []any{int64(1), int64(0), int64(0), int64(3), int64(0)}, 2},
		{"limiting past the end", []any{int64(1), int64(0), int64(0), int64(3), int64(3)}, 2},
	}
	for _, b := range bad {
		_, err := decode(b.v, b.n)
		var re *ReplyError
		if !errors.Is(err, ErrBadReply) || !errors.As(err, &re) {
			t.Errorf("%s: decode(%#v) = %v, want ErrBadReply with a *ReplyError", b.name, b.v, err)
		}
	}
}
