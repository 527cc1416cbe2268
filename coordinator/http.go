package coordinator

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/allot-dev/allot/internal/state"
	"github.com/allot-dev/allot/policy"
)

// Auth guards the admin API's writes.
type Auth struct {
	// Token is the bearer token writes must carry.
	Token string
	// Insecure lets writes through without a token (allot dev, tests).
	Insecure bool
}

// Validate reports a missing token when writes are not open.
func (a Auth) Validate() error {
	if !a.Insecure && strings.TrimSpace(a.Token) == "" {
		return errors.New("admin auth: a token is required (--admin-token-file FILE), or pass --insecure-admin to leave writes open")
	}
	return nil
}

// allows reports whether an Authorization header value carries the token.
func (a Auth) allows(header string) bool {
	if a.Insecure {
		return true
	}
	tok, ok := strings.CutPrefix(header, "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), []byte(a.Token)) == 1
}

// errUnauthorized: a write without the admin token.
var errUnauthorized = errors.New("unauthorized: writes need 'Authorization: Bearer <token>' (allot --token-file FILE)")

// errBadRequest marks malformed requests.
var errBadRequest = errors.New("bad request")

// maxBody bounds admin request bodies (policy documents included).
const maxBody = 4 << 20

// Handler returns the coordinator's HTTP API (a fixed contract): the admin API under
// /v1/, the status page at /, /metrics from gatherer, /healthz and /readyz.
func (c *Coordinator) Handler(auth Auth, gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	h := &httpAPI{c: c, auth: auth}
	mux.HandleFunc("PUT /v1/budgets/{tenant}", h.write("put_budget", h.putBudget))
	mux.HandleFunc("GET /v1/budgets/{tenant}", h.read("get_budget", h.getBudget))
	mux.HandleFunc("DELETE /v1/budgets/{tenant}", h.write("delete_budget", h.deleteBudget))
	mux.HandleFunc("GET /v1/budgets", h.read("list_budgets", h.listBudgets))
	mux.HandleFunc("GET /v1/shares/{tenant}", h.read("shares", h.shares))
	mux.HandleFunc("GET /v1/status", h.read("status", h.status))
	mux.HandleFunc("PUT /v1/policy", h.write("apply_policy", h.applyPolicy))
	mux.HandleFunc("GET /v1/policy", h.read("get_policy", h.getPolicy))
	mux.HandleFunc("GET /v1/policy/history", h.read("policy_history", h.policyHistory))
	mux.HandleFunc("POST /v1/policy/rollback", h.write("rollback_policy", h.rollback))
	mux.Handle("GET /{$}", c.page)
	if gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", h.ready)
	return mux
}

type httpAPI struct {
	c    *Coordinator
	auth Auth
}

type apiFunc func(r *http.Request) (any, error)

func (h *httpAPI) read(op string, f apiFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { h.serve(w, r, op, f) }
}

func (h *httpAPI) write(op string, f apiFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.auth.allows(r.Header.Get("Authorization")) {
			h.reply(w, op, nil, errUnauthorized)
			return
		}
		h.serve(w, r, op, f)
	}
}

func (h *httpAPI) serve(w http.ResponseWriter, r *http.Request, op string, f apiFunc) {
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	v, err := f(r)
	h.reply(w, op, v, err)
}

// errorBody is every error answer.
type errorBody struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
	Line  int    `json:"line,omitempty"`
}

// HTTPStatus maps a domain error to its HTTP status: the one place this
// mapping lives for the coordinator's HTTP API.
func HTTPStatus(err error) int {
	var nl *NotLeaderError
	switch {
	case errors.Is(err, errUnauthorized):
		return http.StatusUnauthorized
	case errors.Is(err, errBadRequest), errors.Is(err, policy.ErrInvalid), errors.Is(err, ErrBadReport):
		return http.StatusBadRequest
	case errors.Is(err, state.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, state.ErrConflict), errors.Is(err, ErrNoPolicy):
		return http.StatusConflict
	case errors.As(err, &nl):
		return http.StatusServiceUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

func (h *httpAPI) reply(w http.ResponseWriter, op string, v any, err error) {
	w.Header().Set("Content-Type", "application/json")
	code := http.StatusOK
	if err != nil {
		code = HTTPStatus(err)
		body := errorBody{Error: err.Error()}
		var fe *policy.FieldError
		if errors.As(err, &fe) {
			body.Field, body.Line = fe.Path, fe.Line
		}
		v = body
		if code == http.StatusInternalServerError {
			h.c.log.Error("admin request failed", "op", op, "err", err)
		}
	}
	h.c.m.adminRequests.WithLabelValues(op, strconv.Itoa(code)).Inc()
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func decodeJSON(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: body: %w", errBadRequest, err)
	}
	return nil
}

// budgetRequest is the body of PUT /v1/budgets/{tenant}.
type budgetRequest struct {
	Rate    string             `json:"rate"`
	Burst   int64              `json:"burst"`
	Mode    string             `json:"mode,omitempty"`
	Home    string             `json:"home,omitempty"`
	Weights map[string]float64 `json:"weights,omitempty"`
	Shadow  bool               `json:"shadow,omitempty"`
	// Budget names one of the tenant's named budgets (or ?budget=).
	Budget    string `json:"budget,omitempty"`
	IfVersion int64  `json:"if_version,omitempty"`
}

func (h *httpAPI) putBudget(r *http.Request) (any, error) {
	var req budgetRequest
	if err := decodeJSON(r, &req); err != nil {
		return nil, err
	}
	name := r.URL.Query().Get("budget")
	if req.Budget != "" {
		if name != "" && name != req.Budget {
			return nil, fmt.Errorf("%w: budget: %q in the body, %q in the query: give one", errBadRequest, req.Budget, name)
		}
		name = req.Budget
	}
	return h.c.PutBudget(r.Context(), BudgetView{
		Tenant: r.PathValue("tenant"), Budget: name, Rate: req.Rate, Burst: req.Burst, Mode: req.Mode,
		Home: req.Home, Weights: req.Weights, Shadow: req.Shadow,
	}, req.IfVersion)
}

func (h *httpAPI) getBudget(r *http.Request) (any, error) {
	return h.c.GetBudget(r.Context(), r.PathValue("tenant"), r.URL.Query().Get("budget"))
}

func (h *httpAPI) deleteBudget(r *http.Request) (any, error) {
	name := r.URL.Query().Get("budget")
	if err := h.c.DeleteBudget(r.Context(), r.PathValue("tenant"), name); err != nil {
		return nil, err
	}
	if name != "" {
		return map[string]string{"deleted": r.PathValue("tenant"), "budget": name}, nil
	}
	return map[string]string{"deleted": r.PathValue("tenant")}, nil
}

func (h *httpAPI) listBudgets(r *http.Request) (any, error) {
	bs, err := h.c.ListBudgets(r.Context())
	return map[string]any{"budgets": bs}, err
}

func (h *httpAPI) shares(r *http.Request) (any, error) {
	return h.c.Shares(r.Context(), r.PathValue("tenant"), r.URL.Query().Get("budget"))
}

func (h *httpAPI) status(r *http.Request) (any, error) { return h.c.Status(r.Context()) }

func queryInt(r *http.Request, name string) (int64, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: query %s=%q: want a whole number", errBadRequest, name, s)
	}
	return v, nil
}

// applyPolicy takes the document (YAML or JSON) as the body;
// ?if_version=N applies only over version N; ?note= records why.
func (h *httpAPI) applyPolicy(r *http.Request) (any, error) {
	ifv, err := queryInt(r, "if_version")
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, fmt.Errorf("%w: body: %w", errBadRequest, err)
	}
	return h.c.ApplyPolicy(r.Context(), string(body), ifv, r.URL.Query().Get("note"))
}

func (h *httpAPI) getPolicy(r *http.Request) (any, error) { return h.c.GetPolicy(r.Context()) }

func (h *httpAPI) policyHistory(r *http.Request) (any, error) {
	limit, err := queryInt(r, "limit")
	if err != nil {
		return nil, err
	}
	vs, err := h.c.PolicyHistory(r.Context(), int(limit))
	return map[string]any{"versions": vs}, err
}

type rollbackRequest struct {
	To        int64 `json:"to"`
	IfVersion int64 `json:"if_version,omitempty"`
}

func (h *httpAPI) rollback(r *http.Request) (any, error) {
	var req rollbackRequest
	if r.ContentLength != 0 {
		if err := decodeJSON(r, &req); err != nil {
			return nil, err
		}
	}
	return h.c.RollbackPolicy(r.Context(), req.To, req.IfVersion)
}

func (h *httpAPI) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if _, err := h.c.cfg.Etcd.Get(ctx, h.c.store.Prefix()+"policy/current"); err != nil {
		http.Error(w, "etcd unreachable: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = io.WriteString(w, "ready\n")
}
