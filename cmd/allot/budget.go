package main

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/allot-dev/allot/gcra"
)

func init() { register(newBudgetCmd) }

// budgetJSON is a budget as the coordinator's API carries it.
type budgetJSON struct {
	Tenant    string             `json:"tenant,omitempty"`
	Budget    string             `json:"budget,omitempty"`
	Rate      string             `json:"rate"`
	Burst     int64              `json:"burst"`
	Mode      string             `json:"mode,omitempty"`
	Home      string             `json:"home,omitempty"`
	Weights   map[string]float64 `json:"weights,omitempty"`
	Shadow    bool               `json:"shadow,omitempty"`
	Version   int64              `json:"version,omitempty"`
	UpdatedAt string             `json:"updated_at,omitempty"`
	IfVersion int64              `json:"if_version,omitempty"`
}

func newBudgetCmd(s *streams) *cobra.Command {
	c := &cobra.Command{
		Use:   "budget",
		Short: "Set, show and delete tenants' global budgets",
		Long: `A tenant's budget is its global rate and burst, split across regions by the
coordinator. Budgets set here take precedence over the policy document.
A tenant may also have named budgets (the policy's budgets: NAME, taken by
limits with rate: budget.NAME, e.g. tokens per minute beside requests per
second), each shared across regions on its own: --budget NAME sets, shows
or deletes one of them.`,
		Example: `  allot budget set t42 --rate 1000/s --burst 200
  allot budget set acme --rate 5/s --burst 3 --mode pinned --home us-east
  allot budget set t42 --budget tokens --rate 200000/m --burst 50000
  allot budget get t42
  allot budget get t42 --budget tokens
  allot budget list -o json
  allot budget delete t42`,
	}
	c.AddCommand(newBudgetSetCmd(s), newBudgetGetCmd(s), newBudgetListCmd(s), newBudgetDeleteCmd(s))
	return c
}

func parseWeights(s string) (map[string]float64, error) {
	if s == "" {
		return nil, nil
	}
	out := map[string]float64{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		w, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil || k == "" {
			return nil, usagef("--weights %q: want REGION=WEIGHT[,REGION=WEIGHT...], e.g. us-east=2,eu-west=1", s)
		}
		out[k] = w
	}
	return out, nil
}

func newBudgetSetCmd(s *streams) *cobra.Command {
	var o adminOpts
	var b budgetJSON
	var weights string
	c := &cobra.Command{
		Use:   "set TENANT --rate N/s --burst B",
		Short: "Set a tenant's global budget",
		Example: `  allot budget set t42 --rate 1000/s --burst 200
  allot budget set t42 --budget tokens --rate 200000/m --burst 50000
  allot budget set acme --rate 5/s --burst 3 --mode pinned --home us-east
  allot budget set t7 --rate 600/m --burst 20 --mode static --weights us-east=2,eu-west=1,ap-south=1`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if b.Rate == "" {
				return usagef("--rate is required, e.g. --rate 1000/s")
			}
			if _, err := gcra.ParseRate(b.Rate); err != nil {
				return usagef("--rate: %v", err)
			}
			if b.Burst < 1 {
				return usagef("--burst %d: want at least 1 (units admissible at once)", b.Burst)
			}
			switch b.Mode {
			case "", "rebalanced", "static", "full", "pinned":
			default:
				return usagef("--mode %q: want rebalanced, static, full or pinned", b.Mode)
			}
			w, err := parseWeights(weights)
			if err != nil {
				return err
			}
			b.Weights = w
			cl, err := o.client()
			if err != nil {
				return err
			}
			var out budgetJSON
			if err := cl.sendJSON(cmd.Context(), "PUT", budgetPath("/v1/budgets/", args[0], b.Budget), b, &out); err != nil {
				return err
			}
			return cl.emit(s.out, out, func() error {
				_, err := fmt.Fprintf(s.out, "budget %s set: %s burst %d (%s), version %d\n", budgetLabel(out.Tenant, out.Budget), out.Rate, out.Burst, modeOr(out.Mode), out.Version)
				return err
			})
		},
	}
	f := c.Flags()
	f.StringVar(&b.Budget, "budget", "", "one of the tenant's named budgets (the policy's budgets: NAME); default: its budget")
	f.StringVar(&b.Rate, "rate", "", "global rate: N/s, N/m, N/h, N/d (24 h) or N/w (168 h)")
	f.Int64Var(&b.Burst, "burst", 0, "units admissible at once, across all regions")
	f.StringVar(&b.Mode, "mode", "", "rebalanced (default), static, full or pinned")
	f.StringVar(&b.Home, "home", "", "home region (mode pinned)")
	f.StringVar(&weights, "weights", "", "static weights: REGION=W,... (mode static)")
	f.BoolVar(&b.Shadow, "shadow", false, "compute and count the budget's decisions but never deny")
	f.Int64Var(&b.IfVersion, "if-version", 0, "write only over this version of the budget (-1: only if absent)")
	addAdminFlags(c, &o)
	return c
}

func modeOr(m string) string {
	if m == "" {
		return "rebalanced"
	}
	return m
}

func budgetTable(s *streams, bs []budgetJSON) error {
	tw := tabwriter.NewWriter(s.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tRATE\tBURST\tMODE\tHOME\tSHADOW\tVERSION\tUPDATED")
	for _, b := range bs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%v\t%d\t%s\n", budgetLabel(b.Tenant, b.Budget), b.Rate, b.Burst, modeOr(b.Mode), dash(b.Home), b.Shadow, b.Version, b.UpdatedAt)
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newBudgetGetCmd(s *streams) *cobra.Command {
	var o adminOpts
	var name string
	c := &cobra.Command{
		Use:     "get TENANT",
		Short:   "Show a tenant's budget",
		Example: "  allot budget get t42\n  allot budget get t42 -o json\n  allot budget get t42 --budget tokens",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := o.client()
			if err != nil {
				return err
			}
			var b budgetJSON
			if err := cl.getJSON(cmd.Context(), budgetPath("/v1/budgets/", args[0], name), &b); err != nil {
				if isNotFound(err) {
					return fmt.Errorf("%s has no budget of its own (it gets its policy tier's; see allot shares %s)", budgetLabel(args[0], name), args[0])
				}
				return err
			}
			return cl.emit(s.out, b, func() error { return budgetTable(s, []budgetJSON{b}) })
		},
	}
	c.Flags().StringVar(&name, "budget", "", "one of the tenant's named budgets; default: its budget")
	addAdminFlags(c, &o)
	return c
}

func newBudgetListCmd(s *streams) *cobra.Command {
	var o adminOpts
	c := &cobra.Command{
		Use:     "list",
		Short:   "List every tenant budget",
		Example: "  allot budget list\n  allot budget list -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := o.client()
			if err != nil {
				return err
			}
			var out struct {
				Budgets []budgetJSON `json:"budgets"`
			}
			if err := cl.getJSON(cmd.Context(), "/v1/budgets", &out); err != nil {
				return err
			}
			return cl.emit(s.out, out, func() error { return budgetTable(s, out.Budgets) })
		},
	}
	addAdminFlags(c, &o)
	return c
}

func newBudgetDeleteCmd(s *streams) *cobra.Command {
	var o adminOpts
	var name string
	c := &cobra.Command{
		Use:     "delete TENANT",
		Short:   "Delete a tenant's budget (it falls back to its policy tier)",
		Example: "  allot budget delete t42\n  allot budget delete t42 --budget tokens",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := o.client()
			if err != nil {
				return err
			}
			if err := cl.do(cmd.Context(), "DELETE", budgetPath("/v1/budgets/", args[0], name), nil, nil, "", nil); err != nil {
				return err
			}
			return cl.emit(s.out, map[string]string{"deleted": args[0]}, func() error {
				_, err := fmt.Fprintf(s.out, "budget %s deleted\n", budgetLabel(args[0], name))
				return err
			})
		},
	}
	c.Flags().StringVar(&name, "budget", "", "one of the tenant's named budgets; default: its budget")
	addAdminFlags(c, &o)
	return c
}
