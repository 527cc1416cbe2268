package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// adminOpts are the flags every admin command takes.
type adminOpts struct {
	coordinator string
	tokenFile   string
	output      string
	timeout     time.Duration
}

func addAdminFlags(c *cobra.Command, o *adminOpts) {
	c.Flags().StringVar(&o.coordinator, "coordinator", "http://127.0.0.1:7070", "coordinator HTTP URL")
	c.Flags().StringVar(&o.tokenFile, "token-file", "", "file holding the admin bearer token (needed for writes unless the coordinator runs with --insecure-admin)")
	c.Flags().StringVarP(&o.output, "output", "o", "table", "output: table or json")
	c.Flags().DurationVar(&o.timeout, "timeout", 10*time.Second, "request timeout")
}

// adminClient calls the coordinator's HTTP admin API.
type adminClient struct {
	base  *url.URL
	token string
	http  *http.Client
	o     *adminOpts
}

func (o *adminOpts) client() (*adminClient, error) {
	switch o.output {
	case "table", "json":
	default:
		return nil, usagef("--output %q: want table or json", o.output)
	}
	u, err := url.Parse(o.coordinator)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usagef("--coordinator %q: want a URL such as http://127.0.0.1:7070", o.coordinator)
	}
	c := &adminClient{base: u, http: &http.Client{Timeout: o.timeout}, o: o}
	if o.tokenFile != "" {
		b, err := os.ReadFile(o.tokenFile)
		if err != nil {
			return nil, usagef("--token-file: %v", err)
		}
		c.token = strings.TrimSpace(string(b))
	}
	return c, nil
}

// at returns a client of the coordinator at addr (an advertised HTTP
// address, host:port or a URL), with this one's scheme, token and options.
func (c *adminClient) at(addr string) (*adminClient, error) {
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" {
		u = &url.URL{Scheme: c.base.Scheme, Host: addr}
	}
	if u.Host == "" {
		return nil, fmt.Errorf("coordinator address %q: want host:port", addr)
	}
	d := *c
	d.base = u
	return &d, nil
}

// apiError is an error answer of the coordinator.
type apiError struct {
	Status int
	Msg    string `json:"error"`
	Field  string `json:"field"`
	Line   int    `json:"line"`
}

func (e *apiError) Error() string {
	hint := ""
	switch e.Status {
	case http.StatusUnauthorized:
		hint = " (pass --token-file FILE with the coordinator's admin token)"
	case http.StatusServiceUnavailable:
		hint = " (no leader yet: retry shortly)"
	}
	return e.Msg + hint
}

// do sends a request and decodes a JSON answer into out (when not nil). A
// non-2xx answer is an *apiError.
func (c *adminClient) do(ctx context.Context, method, path string, query url.Values, body io.Reader, ctype string, out any) (err error) {
	u := *c.base
	path, rawQuery, _ := strings.Cut(path, "?")            // (budgetPath's; tenantPath escapes '?')
	raw := strings.TrimSuffix(u.EscapedPath(), "/") + path // path is escaped already
	if u.Path, err = url.PathUnescape(raw); err != nil {
		return err
	}
	u.RawPath = raw
	u.RawQuery = rawQuery
	if query != nil {
		u.RawQuery = query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("coordinator at %s unreachable (is it running? set --coordinator): %w", c.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return fmt.Errorf("read answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		ae := &apiError{Status: resp.StatusCode}
		if json.Unmarshal(data, ae) != nil || ae.Msg == "" {
			ae.Msg = fmt.Sprintf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(data))
		}
		return ae
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decode answer of %s %s: %w", method, path, err)
	}
	return nil
}

func (c *adminClient) getJSON(ctx context.Context, path string, out any) error {
	return c.do(ctx, http.MethodGet, path, nil, nil, "", out)
}

func (c *adminClient) sendJSON(ctx context.Context, method, path string, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return c.do(ctx, method, path, nil, bytes.NewReader(b), "application/json", out)
}

// emit prints v as JSON with --output json, otherwise calls table.
func (c *adminClient) emit(w io.Writer, v any, table func() error) error {
	if c.o.output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	return table()
}

// tenantPath escapes a tenant for a URL path segment.
func tenantPath(prefix, tenant string) string { return prefix + url.PathEscape(tenant) }

// budgetPath is tenantPath for one of the tenant's budgets: name "" is its
// budget, another name its named budget (?budget=NAME).
func budgetPath(prefix, tenant, name string) string {
	p := tenantPath(prefix, tenant)
	if name != "" {
		p += "?budget=" + url.QueryEscape(name)
	}
	return p
}

// budgetLabel names a tenant's budget for people: the tenant, or
// tenant/NAME for a named budget.
func budgetLabel(tenant, name string) string {
	if name == "" {
		return tenant
	}
	return tenant + "/" + name
}

// isNotFound reports whether err is a 404 answer.
func isNotFound(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.Status == http.StatusNotFound
}
