package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spf13/cobra"
)

func init() { register(newProbeCmd) }

// newProbeCmd is a health check that needs no shell: container images are
// FROM scratch, so compose and Docker health checks run `allot probe URL`.
func newProbeCmd(s *streams) *cobra.Command {
	var timeout time.Duration
	var insecure bool
	c := &cobra.Command{
		Use:   "probe URL",
		Short: "GET a URL and exit 0 on a 2xx answer (a health check for images without a shell)",
		Example: `  allot probe http://127.0.0.1:8080/readyz
  # docker compose: healthcheck: {test: ["CMD", "/allot", "probe", "http://127.0.0.1:8080/readyz"]}`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, args[0], nil)
			if err != nil {
				return usagef("URL %q: %v", args[0], err)
			}
			hc := &http.Client{}
			if insecure {
				hc.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // opt-in, for self-signed health endpoints
			}
			resp, err := hc.Do(req)
			if err != nil {
				return fmt.Errorf("probe %s: %w", args[0], err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			if resp.StatusCode/100 != 2 {
				return fmt.Errorf("probe %s: %s: %s", args[0], resp.Status, body)
			}
			_, err = fmt.Fprintf(s.out, "%s: %s\n", args[0], resp.Status)
			return err
		},
	}
	c.Flags().DurationVar(&timeout, "timeout", 2*time.Second, "give up after this long")
	c.Flags().BoolVar(&insecure, "insecure-skip-verify", false, "accept any TLS certificate")
	return c
}
