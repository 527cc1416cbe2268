package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// Classes of failure, for errors.Is on any error a Store returns for a call
// that reached (or tried to reach) Redis.
var (
	// ErrTimeout: the context deadline passed or the server did not answer
	// in time (a stalled or overloaded Redis).
	ErrTimeout = errors.New("redisstore: timed out")
	// ErrUnavailable: Redis could not serve the call (connection refused or
	// lost, client closed, cluster down, loading, read-only, busy).
	ErrUnavailable = errors.New("redisstore: redis unavailable")
	// ErrRejected: Redis answered the script with an error reply (keys in
	// different cluster slots, a key holding a value that is not a GCRA
	// state, arguments the script refused).
	ErrRejected = errors.New("redisstore: redis rejected the call")
	// ErrBadReply: the reply did not have the shape the scripts return.
	ErrBadReply = errors.New("redisstore: unexpected reply")
	// ErrCanceled: the caller's context was canceled.
	ErrCanceled = errors.New("redisstore: canceled")
)

// ErrContextTimeoutDisabled is returned by New for a client whose options do
// not honour context deadlines.
var ErrContextTimeoutDisabled = errors.New("redisstore: client must be built with ContextTimeoutEnabled: true so that context deadlines bound each call")

// Error is a failed store call: the operation, its class (one of the
// sentinels above) and the cause.
type Error struct {
	Op   string
	Kind error
	Err  error
}

func (e *Error) Error() string {
	return fmt.Sprintf("redisstore: %s: %s: %v", e.Op, strings.TrimPrefix(e.Kind.Error(), "redisstore: "), e.Err)
}

// Is reports whether target is e's class.
func (e *Error) Is(target error) bool { return target == e.Kind }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// ReplyError describes a reply that could not be decoded.
type ReplyError struct {
	Reply  any
	Reason string
}

func (e *ReplyError) Error() string {
	return fmt.Sprintf("reply %#v: %s", e.Reply, e.Reason)
}

// unavailablePrefixes are Redis error replies that mean "not now", not "not
// ever".
var unavailablePrefixes = []string{
	"LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY",
	"BUSY", "OOM", "NOREPLICAS", "MISCONF",
}

// classify wraps err, the failure of op, in an *Error with its class.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	var se *Error
	if errors.As(err, &se) {
		return err
	}
	return &Error{Op: op, Kind: kindOf(err), Err: err}
}

func kindOf(err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, redis.ErrPoolTimeout):
		return ErrTimeout
	case errors.Is(err, context.Canceled):
		return ErrCanceled
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		for _, p := range unavailablePrefixes {
			if strings.HasPrefix(msg, p) {
				return ErrUnavailable
			}
		}
		if errors.Is(err, redis.ErrClosed) {
			return ErrUnavailable
		}
		return ErrRejected
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ErrTimeout
	}
	switch {
	case errors.Is(err, redis.ErrClosed),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE):
		return ErrUnavailable
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return ErrUnavailable
	}
	// Anything else from the client is a transport failure we cannot name
	// better; a failure policy treats it as the store being unavailable.
	return ErrUnavailable
}
