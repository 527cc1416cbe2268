package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func init() { register(newSharesCmd, newStatusCmd) }

type sharesJSON struct {
	Tenant string  `json:"tenant"`
	Rate   float64 `json:"rate"`
	Burst  int64   `json:"burst"`
	Mode   string  `json:"mode"`
	Source string  `json:"source"`
	Shard  int     `json:"shard"`
	Budget string  `json:"budget,omitempty"`
	Leader *struct {
		ID   string `json:"id"`
		HTTP string `json:"http"`
	} `json:"shard_leader,omitempty"`
	Regions []struct {
		Region    string  `json:"region"`
		Rate      float64 `json:"rate"`
		Burst     int64   `json:"burst"`
		Epoch     uint64  `json:"epoch"`
		Demand    float64 `json:"demand"`
		FloorRate float64 `json:"floor_rate"`
		Granted   bool    `json:"granted"`
	} `json:"regions"`
}

func newSharesCmd(s *streams) *cobra.Command {
	var o adminOpts
	var name string
	c := &cobra.Command{
		Use:   "shares TENANT",
		Short: "Show how a tenant's budget is split across regions now",
		Long: `Show how a tenant's budget is split across regions now, as the leader of the
tenant's coordinator shard has it. A coordinator of another shard names that
shard's leader, and the command asks it instead. --budget NAME shows one of
the tenant's named budgets, each split on its own.`,
		Example: "  allot shares t42\n  allot shares t42 -o json\n  allot shares t42 --budget tokens",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := o.client()
			if err != nil {
				return err
			}
			var v sharesJSON
			if err := cl.getJSON(cmd.Context(), budgetPath("/v1/shares/", args[0], name), &v); err != nil {
				return err
			}
			if v.Source == "other_shard" {
				// Ask the leader of the tenant's shard.
				if v.Leader == nil || v.Leader.HTTP == "" {
					return fmt.Errorf("tenant %s belongs to coordinator shard %d, which has no leader now (or it advertises no HTTP address); try again, or ask one of its coordinators with --coordinator", args[0], v.Shard)
				}
				other, err := cl.at(v.Leader.HTTP)
				if err != nil {
					return err
				}
				var w sharesJSON
				if err := other.getJSON(cmd.Context(), budgetPath("/v1/shares/", args[0], name), &w); err != nil {
					return fmt.Errorf("shard %d's leader %s: %w", v.Shard, v.Leader.HTTP, err)
				}
				v = w
			}
			return cl.emit(s.out, v, func() error {
				fmt.Fprintf(s.out, "tenant %s: %.6g/s burst %d, mode %s (from %s", budgetLabel(v.Tenant, v.Budget), v.Rate, v.Burst, v.Mode, v.Source)
				if v.Shard > 0 {
					fmt.Fprintf(s.out, " of shard %d", v.Shard)
				}
				fmt.Fprintln(s.out, ")")
				tw := tabwriter.NewWriter(s.out, 0, 4, 2, ' ', tabwriter.AlignRight)
				fmt.Fprintln(tw, "REGION\tRATE/s\tSHARE\tBURST\tDEMAND/s\tFLOOR/s\tEPOCH\t")
				for _, r := range v.Regions {
					share := 0.0
					if v.Rate > 0 {
						share = 100 * r.Rate / v.Rate
					}
					epoch := fmt.Sprint(r.Epoch)
					if !r.Granted {
						epoch = "floor"
					}
					fmt.Fprintf(tw, "%s\t%.2f\t%.1f%%\t%d\t%.2f\t%.2f\t%s\t\n", r.Region, r.Rate, share, r.Burst, r.Demand, r.FloorRate, epoch)
				}
				return tw.Flush()
			})
		},
	}
	c.Flags().StringVar(&name, "budget", "", "one of the tenant's named budgets; default: its budget")
	addAdminFlags(c, &o)
	return c
}

type statusJSON struct {
	IsLeader bool   `json:"is_leader"`
	ID       string `json:"id"`
	Leader   struct {
		ID, GRPC, HTTP string
	} `json:"leader"`
	Regions []struct {
		Region     string `json:"region"`
		Pods       int    `json:"pods"`
		LastReport string `json:"last_report"`
		Applied    uint64 `json:"applied_epoch"`
		LeaseValid bool   `json:"lease_valid"`
	} `json:"regions"`
	LastRebalance   string  `json:"last_rebalance"`
	LastRebalanceMS float64 `json:"last_rebalance_ms"`
	LastWrites      int     `json:"last_grant_writes"`
	Tenants         int     `json:"tenants"`
	PolicyVersion   int64   `json:"policy_version"`
	Shard           int     `json:"shard"`
	Shards          int     `json:"shards"`
	ShardLeaders    []struct {
		ID    string `json:"id"`
		HTTP  string `json:"http"`
		Shard int    `json:"shard"`
	} `json:"shard_leaders"`
}

func newStatusCmd(s *streams) *cobra.Command {
	var o adminOpts
	c := &cobra.Command{
		Use:   "status",
		Short: "Show the coordinator's leader, regions and last rebalance",
		Long: `Show the coordinator's leader, regions and last rebalance. With several
coordinator shards it also lists every shard's leader; the regions and
rebalance shown are the asked coordinator's shard's (ask another shard's
leader with --coordinator for its own).`,
		Example: "  allot status\n  allot status --coordinator http://coord-0:7070 -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := o.client()
			if err != nil {
				return err
			}
			var raw json.RawMessage
			if err := cl.getJSON(cmd.Context(), "/v1/status", &raw); err != nil {
				return err
			}
			var st statusJSON
			if err := json.Unmarshal(raw, &st); err != nil {
				return fmt.Errorf("decode status: %w", err)
			}
			return cl.emit(s.out, raw, func() error {
				role := "follower"
				if st.IsLeader {
					role = "leader"
				}
				fmt.Fprintf(s.out, "coordinator %s: %s; leader %s (%s)\n", st.ID, role, dash(st.Leader.ID), dash(st.Leader.HTTP))
				fmt.Fprintf(s.out, "policy version %d; %d tenants; last rebalance %s (%.2f ms, %d grant changes)\n",
					st.PolicyVersion, st.Tenants, dash(st.LastRebalance), st.LastRebalanceMS, st.LastWrites)
				if st.Shards > 1 {
					fmt.Fprintf(s.out, "coordinator shard %d of %d\n", st.Shard, st.Shards)
					tw := tabwriter.NewWriter(s.out, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "SHARD\tLEADER\tHTTP")
					for _, l := range st.ShardLeaders {
						fmt.Fprintf(tw, "%d\t%s\t%s\n", l.Shard, dash(l.ID), dash(l.HTTP))
					}
					if err := tw.Flush(); err != nil {
						return err
					}
				}
				if !st.IsLeader {
					return nil
				}
				tw := tabwriter.NewWriter(s.out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "REGION\tPODS\tAPPLIED EPOCH\tLEASE\tLAST REPORT")
				for _, r := range st.Regions {
					lease := "lapsed (floors)"
					if r.LeaseValid {
						lease = "valid"
					}
					fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", r.Region, r.Pods, r.Applied, lease, dash(r.LastReport))
				}
				return tw.Flush()
			})
		},
	}
	addAdminFlags(c, &o)
	return c
}
