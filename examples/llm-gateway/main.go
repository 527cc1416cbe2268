// Command llm-gateway is an example: a reverse proxy for an OpenAI-style
// chat completions API that limits each tenant on requests and on tokens
// with allot. It reserves the tokens a completion may use before calling
// the model, streams the answer through, and settles with the usage the
// model reports, so a tenant is charged what it used. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/allot-dev/allot/client"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "llm-gateway:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("llm-gateway", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8000", "address to serve POST /v1/chat/completions on")
	upstream := fs.String("upstream", "", "the model API's base URL, e.g. https://api.openai.com (or use --fake-upstream)")
	fake := fs.String("fake-upstream", "", "serve a fake model on this address and use it (for trying the gateway out), e.g. 127.0.0.1:8001")
	allot := fs.String("allot", "127.0.0.1:8081", "gRPC address of an allot regional pod")
	tenantHeader := fs.String("tenant-header", "X-Tenant", "header naming the tenant (set by your authenticating proxy)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: llm-gateway --upstream URL [--allot ADDR] [--listen ADDR]

Limits each tenant on requests and tokens with allot: reserves the prompt's
estimate plus max_tokens, streams the completion, settles with the usage the
model reports.

Examples:
  llm-gateway --upstream https://api.openai.com --allot 127.0.0.1:8081
  llm-gateway --fake-upstream 127.0.0.1:8001 --allot 127.0.0.1:37971   # against allot dev

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (*upstream == "") == (*fake == "") {
		return errors.New("give one of --upstream URL and --fake-upstream ADDR")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *fake != "" {
		srv := &http.Server{Addr: *fake, Handler: fakeModel{}, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.ListenAndServe() }()
		defer srv.Close()
		*upstream = "http://" + *fake
	}
	u, err := url.Parse(*upstream)
	if err != nil || u.Host == "" {
		return fmt.Errorf("--upstream %q: want a URL such as https://api.openai.com", *upstream)
	}
	cl, err := client.New(client.Config{Target: *allot, Insecure: true, Timeout: 50 * time.Millisecond})
	if err != nil {
		return err
	}
	defer cl.Close()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	g := &Gateway{Upstream: u, Limiter: cl, TenantHeader: *tenantHeader, Log: log}
	srv := &http.Server{Addr: *listen, Handler: g, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info("llm-gateway serving", "listen", *listen, "upstream", u.String(), "allot", *allot)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
