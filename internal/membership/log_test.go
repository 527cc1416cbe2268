package membership

import (
	"log/slog"
	"strings"
	"testing"
)

func TestParseLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in    string
		level slog.Level
		msg   string
	}{
		{"[DEBUG] memberlist: Stream connection from=127.0.0.1:5000\n", slog.LevelDebug, "Stream connection from=127.0.0.1:5000"},
		{"[INFO] memberlist: Suspect b has failed, no acks received\n", slog.LevelInfo, "Suspect b has failed, no acks received"},
		{"[WARN] memberlist: Was able to connect to b over TCP but UDP probes failed\n", slog.LevelWarn, "Was able to connect to b over TCP but UDP probes failed"},
		{"[ERR] memberlist: Failed to send ping: write: broken pipe\n", slog.LevelError, "Failed to send ping: write: broken pipe"},
		{"[ERROR] memberlist: x", slog.LevelError, "x"},
		{"[TRACE] memberlist: x", slog.LevelDebug, "x"},
		{"[ERR] Failed to shutdown transport: closed\n", slog.LevelError, "Failed to shutdown transport: closed"},
		{"no level at all\n", slog.LevelInfo, "no level at all"},
		{"[odd] memberlist: x", slog.LevelInfo, "[odd] memberlist: x"},
		{"[", slog.LevelInfo, "["},
		{"", slog.LevelInfo, ""},
	}
	for _, tt := range tests {
		level, msg := parseLine(tt.in)
		if level != tt.level || msg != tt.msg {
			t.Errorf("parseLine(%q) = %v, %q, want %v, %q", tt.in, level, msg, tt.level, tt.msg)
		}
	}
}

func FuzzParseLine(f *testing.F) {
	f.Add("[WARN] memberlist: x\n")
	f.Add("[]")
	f.Add("[ERR]")
	f.Fuzz(func(t *testing.T, s string) {
		level, msg := parseLine(s)
		switch level {
		case slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError:
		default:
			t.Fatalf("parseLine(%q) level %v", s, level)
		}
		if len(msg) > len(s) {
			t.Fatalf("parseLine(%q) message %q longer than the line", s, msg)
		}
		if !strings.Contains(s, msg) {
			t.Fatalf("parseLine(%q) message %q is not part of the line", s, msg)
		}
	})
}
