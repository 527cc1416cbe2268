package main

import (
	"net/http"
	"net/http/pprof"

	"github.com/spf13/pflag"
)

// opsConfig is the optional plaintext operations listener of a server
// command: health, readiness and metrics for kubelets and scrapers that
// cannot present the client certificate the API listeners require.
type opsConfig struct {
	listen string
	pprof  bool
}

func opsFlags(f *pflag.FlagSet, o *opsConfig) {
	f.StringVar(&o.listen, "ops-listen", "", "plaintext listener for /healthz, /readyz and /metrics only (probes and scrapers under mutual TLS), e.g. 0.0.0.0:8090; off when empty")
	f.BoolVar(&o.pprof, "pprof", false, "also serve Go's profiles at /debug/pprof/ on --ops-listen")
}

func (o opsConfig) validate() error {
	if o.pprof && o.listen == "" {
		return usagef("--pprof needs --ops-listen: profiles are served only there")
	}
	return nil
}

// opsHandler serves the operations paths of api (the command's HTTP
// handler, which implements them), and profiles when pprof is set;
// everything else is 404, so no API is reachable without its credentials.
func opsHandler(api http.Handler, withPprof bool) http.Handler {
	mux := http.NewServeMux()
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		mux.Handle("GET "+p, api)
	}
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}
