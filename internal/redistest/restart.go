package redistest

import "testing"

// Restart kills the server if it runs and starts a new, empty one on the
// same port, so clients reconnect to the same address.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.Kill()
	bin, _ := binaries(tb)
	ns, err := launch(tb, bin, s.Port, false, nil)
	if err != nil {
		tb.Fatalf("redistest: restart on port %d: %v", s.Port, err)
	}
	s.mu.Lock()
	s.cmd, s.done, s.Dir = ns.cmd, ns.done, ns.Dir
	s.mu.Unlock()
}
