package main

import (
	"bytes"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/allot-dev/allot/policy"
)

func init() { register(newPolicyCmd) }

type policyJSON struct {
	Version      int64  `json:"version"`
	Document     string `json:"document"`
	AppliedAt    string `json:"applied_at"`
	Note         string `json:"note,omitempty"`
	RestoredFrom int64  `json:"restored_from,omitempty"`
}

func newPolicyCmd(s *streams) *cobra.Command {
	c := &cobra.Command{
		Use:   "policy",
		Short: "Apply, show and roll back the versioned policy",
		Long: `The policy names the regions, the limits, the tiers and per-tenant overrides.
Every apply is validated first and stored as a new version; every version is
kept and any can be restored exactly.`,
		Example: `  allot policy apply -f deploy/policy.example.yaml
  allot policy get
  allot policy history
  allot policy rollback            # to the version before the current one
  allot policy rollback --to 3`,
	}
	c.AddCommand(newPolicyApplyCmd(s), newPolicyGetCmd(s), newPolicyHistoryCmd(s), newPolicyRollbackCmd(s))
	return c
}

func newPolicyApplyCmd(s *streams) *cobra.Command {
	var o adminOpts
	var file, note string
	var ifVersion int64
	c := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Validate a policy file and store it as the next version",
		Example: `  allot policy apply -f deploy/policy.example.yaml
  allot policy apply -f policy.yaml --if-version 4 --note "raise pro tier"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usagef("-f FILE is required")
			}
			var data []byte
			var err error
			if file == "-" {
				data, err = io.ReadAll(cmd.InOrStdin())
			} else {
				data, err = os.ReadFile(file)
			}
			if err != nil {
				return usagef("-f %s: %v", file, err)
			}
			// Check offline first: a bad file sends nothing.
			if _, err := policy.Parse(data); err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			cl, err := o.client()
			if err != nil {
				return err
			}
			q := url.Values{}
			if ifVersion != 0 {
				q.Set("if_version", strconv.FormatInt(ifVersion, 10))
			}
			if note != "" {
				q.Set("note", note)
			}
			var out policyJSON
			if err := cl.do(cmd.Context(), "PUT", "/v1/policy", q, bytes.NewReader(data), "application/yaml", &out); err != nil {
				return err
			}
			return cl.emit(s.out, out, func() error {
				_, err := fmt.Fprintf(s.out, "policy version %d applied\n", out.Version)
				return err
			})
		},
	}
	c.Flags().StringVarP(&file, "file", "f", "", "policy file (YAML or JSON; - for stdin)")
	c.Flags().Int64Var(&ifVersion, "if-version", 0, "apply only if the current version is this one")
	c.Flags().StringVar(&note, "note", "", "why, recorded in the history")
	addAdminFlags(c, &o)
	return c
}

func newPolicyGetCmd(s *streams) *cobra.Command {
	var o adminOpts
	c := &cobra.Command{
		Use:     "get",
		Short:   "Print the current policy document",
		Example: "  allot policy get > policy.yaml\n  allot policy get -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := o.client()
			if err != nil {
				return err
			}
			var out policyJSON
			if err := cl.getJSON(cmd.Context(), "/v1/policy", &out); err != nil {
				if isNotFound(err) {
					return fmt.Errorf("no policy applied yet: apply one with 'allot policy apply -f FILE'")
				}
				return err
			}
			return cl.emit(s.out, out, func() error {
				_, err := io.WriteString(s.out, out.Document)
				return err
			})
		},
	}
	addAdminFlags(c, &o)
	return c
}

func newPolicyHistoryCmd(s *streams) *cobra.Command {
	var o adminOpts
	var limit int
	c := &cobra.Command{
		Use:     "history",
		Short:   "List policy versions, newest first",
		Example: "  allot policy history\n  allot policy history --limit 5 -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := o.client()
			if err != nil {
				return err
			}
			var out struct {
				Versions []policyJSON `json:"versions"`
			}
			q := url.Values{"limit": {strconv.Itoa(limit)}}
			if err := cl.do(cmd.Context(), "GET", "/v1/policy/history", q, nil, "", &out); err != nil {
				return err
			}
			return cl.emit(s.out, out, func() error {
				tw := tabwriter.NewWriter(s.out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "VERSION\tAPPLIED\tNOTE")
				for _, v := range out.Versions {
					fmt.Fprintf(tw, "%d\t%s\t%s\n", v.Version, v.AppliedAt, dash(v.Note))
				}
				return tw.Flush()
			})
		},
	}
	c.Flags().IntVar(&limit, "limit", 20, "versions to list (0: all)")
	addAdminFlags(c, &o)
	return c
}

func newPolicyRollbackCmd(s *streams) *cobra.Command {
	var o adminOpts
	var to, ifVersion int64
	c := &cobra.Command{
		Use:     "rollback [--to VERSION]",
		Short:   "Restore an earlier policy version (as a new version)",
		Example: "  allot policy rollback\n  allot policy rollback --to 3",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if to < 0 {
				return usagef("--to %d: want a version ≥ 1 (0: the one before the current)", to)
			}
			cl, err := o.client()
			if err != nil {
				return err
			}
			var out policyJSON
			if err := cl.sendJSON(cmd.Context(), "POST", "/v1/policy/rollback", map[string]int64{"to": to, "if_version": ifVersion}, &out); err != nil {
				return err
			}
			return cl.emit(s.out, out, func() error {
				_, err := fmt.Fprintf(s.out, "policy version %d restored as version %d\n", out.RestoredFrom, out.Version)
				return err
			})
		},
	}
	c.Flags().Int64Var(&to, "to", 0, "version to restore (default: the one before the current)")
	c.Flags().Int64Var(&ifVersion, "if-version", 0, "roll back only if the current version is this one")
	addAdminFlags(c, &o)
	return c
}
