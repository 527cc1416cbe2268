package envoycompat

import (
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/allot-dev/allot/policy/envoyconf"
)

// maxJSONBody bounds a /json request body.
const maxJSONBody = 1 << 20

// JSONHandler is the original's /json endpoint: a RateLimitRequest in
// protobuf JSON, answered with the RateLimitResponse in protobuf JSON,
// status 200 (OK), 429 (OVER_LIMIT), 400 (a request that does not parse or
// that the service refuses) or 500.
func JSONHandler(rls rlsv3.RateLimitServiceServer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
		if err != nil {
			http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
			return
		}
		var req rlsv3.RateLimitRequest
		if err := protojson.Unmarshal(body, &req); err != nil {
			http.Error(w, "not a RateLimitRequest in JSON: "+err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := rls.ShouldRateLimit(r.Context(), &req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch resp.GetOverallCode() {
		case rlsv3.RateLimitResponse_OVER_LIMIT:
			w.WriteHeader(http.StatusTooManyRequests)
		case rlsv3.RateLimitResponse_UNKNOWN:
			w.WriteHeader(http.StatusInternalServerError)
		}
		_, _ = w.Write(out)
	})
}

// HealthHandler is the original's /healthcheck: 200 "OK" while healthy,
// 500 otherwise.
func HealthHandler(healthy func() bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !healthy() {
			http.Error(w, "not healthy", http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, "OK")
	})
}

// DebugHandler is the original's debug listener: /rlconfig (the loaded
// configuration, one limit per line), /debug/pprof/, and an index at /.
func DebugHandler(config func() *envoyconf.Config) http.Handler {
	mux := http.NewServeMux()
	endpoints := map[string]string{
		"/rlconfig":            "print out the currently loaded configuration for debugging",
		"/debug/pprof/":        "root of various pprof endpoints. hit for help.",
		"/debug/pprof/profile": "CPU profiling endpoint",
		"/debug/pprof/trace":   "trace endpoint",
	}
	mux.HandleFunc("/rlconfig", func(w http.ResponseWriter, _ *http.Request) {
		if c := config(); c != nil {
			_, _ = io.WriteString(w, c.Dump())
		}
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		for _, k := range []string{"/debug/pprof/", "/debug/pprof/profile", "/debug/pprof/trace", "/rlconfig"} {
			fmt.Fprintf(w, "%s: %s\n", k, endpoints[k])
		}
	})
	return mux
}
