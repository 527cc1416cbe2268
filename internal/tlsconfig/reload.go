package tlsconfig

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// keyPair serves a certificate and key from files, re-reading them when
// their modification time or size changes, checked at most once per
// interval.
type keyPair struct {
	certFile, keyFile string
	interval          time.Duration
	log               *slog.Logger

	cur       atomic.Pointer[tls.Certificate]
	nextCheck atomic.Int64 // unix nanoseconds
	mu        sync.Mutex   // one reload at a time; guards stamps
	stamps    [2]stamp     // of the files cur was loaded from
}

// stamp identifies one version of a file.
type stamp struct {
	mod  time.Time
	size int64
}

func statFile(name string) (stamp, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return stamp{}, err
	}
	return stamp{fi.ModTime(), fi.Size()}, nil
}

// loadKeyPair loads the pair once, with errors naming the flag of the file
// at fault.
func loadKeyPair(n namer, certFile, keyFile string, interval time.Duration, l *slog.Logger) (*keyPair, error) {
	kp := &keyPair{certFile: certFile, keyFile: keyFile, interval: interval, log: logger(l)}
	var err error
	if kp.stamps[0], err = statFile(certFile); err != nil {
		return nil, fmt.Errorf("tls config: %s: %w", n.field("cert", "CertFile"), err)
	}
	if kp.stamps[1], err = statFile(keyFile); err != nil {
		return nil, fmt.Errorf("tls config: %s: %w", n.field("key", "KeyFile"), err)
	}
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("tls config: %s: %w", n.field("cert", "CertFile"), err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("tls config: %s: %w", n.field("key", "KeyFile"), err)
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("tls config: %s, %s: %w", n.field("cert", "CertFile"), n.field("key", "KeyFile"), err)
	}
	kp.cur.Store(&c)
	kp.nextCheck.Store(time.Now().Add(interval).UnixNano())
	return kp, nil
}

// get returns the current certificate, first reloading it if the check is
// due, the files changed, and no other handshake is reloading already.
func (kp *keyPair) get() *tls.Certificate {
	if kp.interval > 0 && time.Now().UnixNano() >= kp.nextCheck.Load() && kp.mu.TryLock() {
		now := time.Now()
		if now.UnixNano() >= kp.nextCheck.Load() {
			kp.nextCheck.Store(now.Add(kp.interval).UnixNano())
			kp.reload()
		}
		kp.mu.Unlock()
	}
	return kp.cur.Load()
}

// reload re-reads the pair if either file changed. A pair that fails to
// load is logged and not recorded, so the next check tries again. Called
// with mu held.
func (kp *keyPair) reload() {
	cs, err1 := statFile(kp.certFile)
	ks, err2 := statFile(kp.keyFile)
	if err1 != nil || err2 != nil {
		kp.log.Warn("TLS certificate reload: keeping the current certificate", "cert", kp.certFile, "key", kp.keyFile, "err", firstErr(err1, err2))
		return
	}
	if cs == kp.stamps[0] && ks == kp.stamps[1] {
		return
	}
	c, err := tls.LoadX509KeyPair(kp.certFile, kp.keyFile)
	if err != nil {
		kp.log.Warn("TLS certificate reload: keeping the current certificate", "cert", kp.certFile, "key", kp.keyFile, "err", err)
		return
	}
	kp.cur.Store(&c)
	kp.stamps = [2]stamp{cs, ks}
	attrs := []any{"cert", kp.certFile}
	if c.Leaf != nil {
		attrs = append(attrs, "subject", c.Leaf.Subject.String(), "not_after", c.Leaf.NotAfter)
	}
	kp.log.Info("TLS certificate reloaded", attrs...)
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
