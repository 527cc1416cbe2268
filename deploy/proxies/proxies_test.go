package proxies

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/dev"
	"github.com/allot-dev/allot/internal/devtest"
	"github.com/allot-dev/allot/internal/wait"
)

// A pod's HTTP API (one region, allot dev's policy: the free tier's budget
// of 100/s, burst 20), and an application behind the proxy.
func startBackends(t *testing.T) (allot, app string) {
	t.Helper()
	cfg := dev.DefaultConfig()
	cfg.Regions, cfg.HTTPListen = []string{"us-east"}, "127.0.0.1:0"
	cl := devtest.Start(t, cfg)
	pod := httptest.NewServer(cl.Regions[0].Service.Handler(nil, ""))
	t.Cleanup(pod.Close)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "hello from the app\n")
	}))
	t.Cleanup(up.Close)
	return strings.TrimPrefix(pod.URL, "http://"), strings.TrimPrefix(up.URL, "http://")
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// render writes the file with its placeholders filled in.
func render(t *testing.T, src, dst string, vars map[string]string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for k, v := range vars {
		s = strings.ReplaceAll(s, "{{"+k+"}}", v)
	}
	if strings.Contains(s, "{{") {
		t.Fatalf("%s: a placeholder is left", src)
	}
	if err := os.WriteFile(dst, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

// run starts a proxy process until the test ends and waits until it
// answers at addr.
func run(t *testing.T, addr, bin string, env []string, args ...string) {
	t.Helper()
	path, err := exec.LookPath(bin)
	if err != nil {
		t.Fatalf("%s is not installed (apt-get install -y nginx caddy; .ci/run installs them): %v", bin, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	// Its own process group, so that nginx's workers go with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logf, err := os.Create(filepath.Join(t.TempDir(), bin+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if err := <-exited; err == nil {
			t.Logf("%s exited cleanly", bin)
		}
		_ = logf.Close()
	})
	out := func() string { b, _ := os.ReadFile(logf.Name()); return string(b) }
	wait.Until(t, 15*time.Second, func() error {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("%s exited: %v\n%s", bin, err, out())
		default:
		}
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			return err
		}
		_ = c.Close()
		return nil
	})
}

// check sends a burst of requests for one tenant through the proxy: the
// first are the app's 200s, those beyond the budget's burst of 20 get 429
// with Retry-After and the RateLimit fields; another tenant is untouched;
// a client that names the tenant itself through X-Allot-Tenant is not
// believed.
func check(t *testing.T, proxy string) {
	t.Helper()
	type answer struct {
		StatusCode int
		Header     http.Header
	}
	get := func(tenant string, hdr map[string]string) (answer, string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+proxy+"/hello", nil)
		if tenant != "" {
			req.Header.Set("X-Tenant", tenant)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		return answer{resp.StatusCode, resp.Header}, string(b)
	}
	var ok, limited int
	var last answer
	for range 40 {
		resp, body := get("acme", nil)
		switch resp.StatusCode {
		case http.StatusOK:
			if !strings.Contains(body, "hello from the app") {
				t.Fatalf("200 without the app's body: %q", body)
			}
			ok++
		case http.StatusTooManyRequests:
			limited++
			last = resp
		default:
			t.Fatalf("status %d: %q", resp.StatusCode, body)
		}
	}
	if ok < 20 || limited == 0 {
		t.Fatalf("40 requests at once against a burst of 20: %d allowed, %d limited; want at least 20 and some 429s", ok, limited)
	}
	if last.Header.Get("Retry-After") == "" || !strings.Contains(last.Header.Get("RateLimit"), "r=0") || last.Header.Get("RateLimit-Policy") == "" {
		t.Fatalf("429 without Retry-After or RateLimit fields: %v", last.Header)
	}
	if resp, _ := get("globex", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("another tenant: %d, want 200", resp.StatusCode)
	}
	// A client naming another tenant in allot's own header does not
	// spend that tenant's budget (the proxy sets the header itself):
	// after 25 such requests globex still has its burst.
	for range 25 {
		get("acme", map[string]string{"X-Allot-Tenant": "globex", "X-Allot-Cost": "5"})
	}
	for i := range 18 {
		if resp, _ := get("globex", nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("globex's request %d after acme claimed its name: %d, want 200 (acme spent globex's budget)", i, resp.StatusCode)
		}
	}
	t.Logf("%s: %d allowed, %d limited; 429 with Retry-After %s, RateLimit %s", proxy, ok, limited, last.Header.Get("Retry-After"), last.Header.Get("RateLimit"))
}

func TestNginx(t *testing.T) {
	allot, app := startBackends(t)
	dir := t.TempDir()
	listen := freeAddr(t)
	conf := filepath.Join(dir, "nginx.conf")
	render(t, "nginx.conf", conf, map[string]string{"listen": listen, "upstream": app, "allot": allot, "dir": dir})
	run(t, listen, "nginx", nil, "-c", conf, "-p", dir)
	check(t, listen)
}

func TestCaddy(t *testing.T) {
	allot, app := startBackends(t)
	dir := t.TempDir()
	listen := freeAddr(t)
	conf := filepath.Join(dir, "Caddyfile")
	render(t, "Caddyfile", conf, map[string]string{"listen": listen, "upstream": app, "allot": allot})
	run(t, listen, "caddy", []string{"HOME=" + dir, "XDG_DATA_HOME=" + dir, "XDG_CONFIG_HOME=" + dir}, "run", "--config", conf, "--adapter", "caddyfile")
	check(t, listen)
}

// The statuses a proxy may ask forward-auth for instead of 429 and 503, and
// a clear error for others.
func TestForwardAuthStatuses(t *testing.T) {
	allot, _ := startBackends(t)
	ask := func(q string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+allot+"/v1/forward-auth"+q, nil)
		req.Header.Set("X-Allot-Tenant", "t1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := ask("?deny_status=418"); code != 400 || !strings.Contains(body, "deny_status") {
		t.Fatalf("deny_status=418: %d %q, want 400 naming deny_status", code, body)
	}
	if code, body := ask("?unavailable_status=x"); code != 400 || !strings.Contains(body, "unavailable_status") {
		t.Fatalf("unavailable_status=x: %d %q, want 400 naming it", code, body)
	}
	codes := map[int]int{}
	for range 30 {
		code, _ := ask("?deny_status=403")
		codes[code]++
	}
	if codes[200] < 20 || codes[403] == 0 || len(codes) != 2 {
		t.Fatalf("30 asks with deny_status=403 against a burst of 20: %v, want 200s then 403s", codes)
	}
}

// Envoy's ext_authz in HTTP mode asks with the request's own method and its
// path appended to the prefix: forward-auth answers those alike.
func TestForwardAuthExtAuthzShape(t *testing.T) {
	allot, _ := startBackends(t)
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/v1/forward-auth"},
		{http.MethodPost, "/v1/forward-auth/api/chat"},
		{http.MethodDelete, "/v1/forward-auth/x?y=1"},
	} {
		req, _ := http.NewRequest(c.method, "http://"+allot+c.path, nil)
		req.Header.Set("X-Allot-Tenant", "t-"+c.method)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("RateLimit") == "" {
			t.Errorf("%s %s: %d %v, want 200 with the RateLimit fields", c.method, c.path, resp.StatusCode, resp.Header)
		}
	}
}
