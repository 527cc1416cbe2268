package membership

import (
	"context"
	"log"
	"log/slog"
	"strings"
)

// slogWriter turns memberlist's log lines ("[WARN] memberlist: text") into
// slog records at the matching level. log.Logger serializes calls to Write
// and hands it one line at a time.
type slogWriter struct{ l *slog.Logger }

func newStdLogger(l *slog.Logger) *log.Logger {
	return log.New(slogWriter{l}, "", 0)
}

func (w slogWriter) Write(p []byte) (int, error) {
	level, msg := parseLine(string(p))
	if w.l.Enabled(context.Background(), level) {
		w.l.Log(context.Background(), level, msg)
	}
	return len(p), nil
}

// parseLine splits a memberlist log line into its level and message. Lines
// without a recognised "[LEVEL]" prefix are logged at Info; the
// "memberlist: " tag, which the logger's own attributes replace, is dropped.
func parseLine(s string) (slog.Level, string) {
	s = strings.TrimRight(s, "\r\n")
	level := slog.LevelInfo
	if strings.HasPrefix(s, "[") {
		if end := strings.IndexByte(s, ']'); end > 0 {
			if l, ok := levelOf(s[1:end]); ok {
				level = l
				s = strings.TrimLeft(s[end+1:], " ")
			}
		}
	}
	s = strings.TrimPrefix(s, "memberlist: ")
	return level, s
}

func levelOf(tag string) (slog.Level, bool) {
	switch strings.ToUpper(tag) {
	case "TRACE", "DEBUG":
		return slog.LevelDebug, true
	case "INFO":
		return slog.LevelInfo, true
	case "WARN", "WARNING":
		return slog.LevelWarn, true
	case "ERR", "ERROR":
		return slog.LevelError, true
	}
	return 0, false
}
