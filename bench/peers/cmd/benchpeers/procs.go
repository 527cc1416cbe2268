package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/allot-dev/allot/bench/peers/internal/peerkit"
)

// proc is one child process: a server under test or a helper. Its stdout and
// stderr go to a log file in the work directory.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // set before done closes
}

// startProc starts bin with args (and env added to the harness's), logging
// to logDir/name.log. The child gets SIGKILL if the harness dies (Linux).
func startProc(name, logDir string, env []string, bin string, args ...string) (*proc, error) {
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("%s: log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("%s: start %s: %w", name, bin, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, waits up to grace, then kills.
func (p *proc) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// tail returns the last lines of the process's log.
func (p *proc) tail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitReady polls check until it succeeds, the process exits, or within
// passes.
func waitReady(ctx context.Context, p *proc, within time.Duration, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		err := check(cctx)
		ccancel()
		if err == nil {
			return nil
		}
		if p != nil && p.exited() {
			status := "exit status 0"
			if p.err != nil {
				status = p.err.Error()
			}
			return fmt.Errorf("%s exited (%s) before it was ready: %w\n--- %s (last lines)\n%s", p.name, status, err, p.log, p.tail(20))
		}
		select {
		case <-ctx.Done():
			msg := fmt.Errorf("not ready within %v: %w", within, err)
			if p != nil {
				return fmt.Errorf("%s: %w\n--- %s (last lines)\n%s", p.name, msg, p.log, p.tail(20))
			}
			return msg
		case <-tick.C:
		}
	}
}

// freeAddr returns a loopback address with a port that was free a moment
// ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("free port: %w", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return "", fmt.Errorf("free port: %w", err)
	}
	return addr, nil
}

// freeAddrs returns n distinct free loopback addresses.
func freeAddrs(n int) ([]string, error) { return peerkit.FreeAddrs(n) }

// portOf returns the port of a host:port address.
func portOf(addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	return port
}

// runCmd runs a command to completion in dir and returns its combined
// output, with the output in the error when it fails.
func runCmd(ctx context.Context, dir string, env []string, bin string, args ...string) (string, error) {
	return peerkit.RunCmd(ctx, dir, env, bin, args...)
}
