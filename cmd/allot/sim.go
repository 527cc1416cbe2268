package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/allot-dev/allot/shares/sim"
)

func init() { register(newSimCmd) }

// simOptions are the flags of allot sim.
type simOptions struct {
	scenario string
	format   string
	out      string
	seed     uint64
	seeds    int
	network  string
	compare  string
	lease    time.Duration
}

func simLong() string {
	var b strings.Builder
	b.WriteString(`Run the deterministic multi-region simulator: three regions of two pods
each enforce their share of one tenant's budget with the GCRA twin (both pods
of a region on the region's one key), the coordinator's leader answers each
pod's report with a lease and the region's changed grants (protocol v2: the
real shares.Leader and shares.Pod), messages are delayed and lost, and faults
strike (a failover starts a new term that learns before it grants). Every
scenario runs in each of its modes (rebalanced, static, full; pinned for the
pinned scenario) on the same traffic, and is compared with one central
limiter over the merged arrivals.

The same seed gives the same numbers. Reference setup: R = 1000/s, B = 200,
P = 2s rebalance and report interval, L = 10s lease, every message between
a pod and the coordinator delayed 50-150 ms (--network wan; --network slow
delays each by up to one interval).

Scenarios:
`)
	for _, s := range sim.Scenarios() {
		fmt.Fprintf(&b, "  %-12s %s\n", s.Name, s.Description)
	}
	b.WriteString("\n")
	b.WriteString(sim.Legend)
	b.WriteString(`

--out DIR writes, per scenario, SCENARIO.png and SCENARIO.svg (world admitted
rate per mode against R; each region's grant against its ideal share) and a
markdown table results.md. Progress goes to stderr.`)
	return b.String()
}

func newSimCmd(s *streams) *cobra.Command {
	var o simOptions
	c := &cobra.Command{
		Use:   "sim",
		Short: "Run the deterministic multi-region simulator",
		Long:  simLong(),
		Example: `  allot sim                                  # every scenario, a table
  allot sim --scenario skew-shift --format json
  allot sim --seeds 5 --out docs/sim         # mean and worst of 5 seeds, plots and results.md
  allot sim --scenario partition --seed 42
  allot sim --network slow                   # every message delayed by up to P
  allot sim --scenario partition --lease 4s  # shorter leases: a cut region's room frees sooner
  allot sim --format json > before.json      # then, after a change:
  allot sim --compare before.json            # each measure beside its value before`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSim(cmd, s, o)
		},
	}
	f := c.Flags()
	f.StringVar(&o.scenario, "scenario", "all", "scenario to run, or all: "+strings.Join(sim.Names(), ", "))
	f.StringVar(&o.format, "format", "table", "output format: table or json")
	f.StringVar(&o.out, "out", "", "directory to write plots (PNG and SVG) and results.md into")
	f.Uint64Var(&o.seed, "seed", 1, "first seed")
	f.IntVar(&o.seeds, "seeds", 1, "number of seeds (seed, seed+1, ...); reports mean and worst")
	f.StringVar(&o.network, "network", "wan", "message delays: wan (50-150 ms each) or slow (up to one interval each)")
	f.DurationVar(&o.lease, "lease", 0, "lease L of every scenario (0: each scenario's own, 10s); a failover's new term learns for at most L + its session TTL")
	f.StringVar(&o.compare, "compare", "", "JSON of an earlier run (allot sim --format json) to show beside this one's: utilisation, shift loss and time to 90% read \"now (was then)\"")
	return c
}

func runSim(cmd *cobra.Command, s *streams, o simOptions) error {
	if o.format != "table" && o.format != "json" {
		return usagef("--format %q: want table or json", o.format)
	}
	if o.seeds < 1 {
		return usagef("--seeds %d: want at least 1", o.seeds)
	}
	var specs []*sim.Spec
	if o.scenario == "" || o.scenario == "all" {
		specs = sim.Scenarios()
	} else {
		spec, err := sim.Lookup(o.scenario)
		if err != nil {
			return usagef("--scenario %q: unknown; valid: all, %s", o.scenario, strings.Join(sim.Names(), ", "))
		}
		specs = []*sim.Spec{spec}
	}
	var baseline []sim.Row
	if o.compare != "" {
		f, err := os.Open(o.compare)
		if err != nil {
			return fmt.Errorf("--compare: %w", err)
		}
		baseline, err = sim.ReadJSON(f)
		_ = f.Close()
		if err != nil {
			return usagef("--compare %q: %v: want the output of allot sim --format json", o.compare, err)
		}
	}
	if o.lease < 0 {
		return usagef("--lease %v: want a positive duration (or 0 for each scenario's own)", o.lease)
	}
	for _, spec := range specs {
		if err := spec.UseNetwork(o.network); err != nil {
			return usagef("--network %q: want one of %s", o.network, strings.Join(sim.Networks, ", "))
		}
		if o.lease > 0 {
			if o.lease < 2*spec.Interval {
				return usagef("--lease %v: want at least two intervals (%v in scenario %s)", o.lease, 2*spec.Interval, spec.Name)
			}
			spec.Lease = o.lease
			if err := spec.Validate(); err != nil {
				return usagef("--lease %v: %v", o.lease, err)
			}
		}
	}
	if o.out != "" {
		if err := os.MkdirAll(o.out, 0o755); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
	}
	ctx := cmd.Context()
	total := 0
	for _, spec := range specs {
		total += len(spec.Modes) * o.seeds
	}
	start := time.Now()
	done := 0
	var rows []sim.Row
	for _, spec := range specs {
		var plotted []*sim.Result
		for _, mode := range spec.Modes {
			runs := make([]*sim.Result, 0, o.seeds)
			for k := range o.seeds {
				if err := ctx.Err(); err != nil {
					return fmt.Errorf("sim interrupted: %w", err)
				}
				r, err := sim.Run(spec, mode, o.seed+uint64(k))
				if err != nil {
					return err
				}
				runs = append(runs, r)
				done++
			}
			plotted = append(plotted, runs[0])
			rows = append(rows, sim.Summarise(runs))
			if spec.Users != nil && mode == spec.Modes[0] {
				var c sim.Cost
				for _, r := range runs {
					c.Rebalances += r.Cost.Rebalances
					c.RebalanceTime += r.Cost.RebalanceTime
					c.Reports += r.Cost.Reports
					c.ReportTime += r.Cost.ReportTime
				}
				fmt.Fprintf(s.err, "sim: %-12s %s: the leader took %v per rebalance and %v per report (wall clock on this machine; not in results.md)\n",
					spec.Name, mode, c.PerRebalance().Round(time.Microsecond), c.PerReport().Round(100*time.Nanosecond))
			}
		}
		fmt.Fprintf(s.err, "sim: %-12s %d modes × %d seeds done (%d/%d runs, %v)\n",
			spec.Name, len(spec.Modes), o.seeds, done, total, time.Since(start).Round(time.Millisecond))
		if o.out != "" {
			if err := writePlots(o.out, spec, plotted); err != nil {
				return err
			}
		}
	}
	if baseline != nil {
		if n := sim.Compare(rows, baseline); n == 0 {
			fmt.Fprintf(s.err, "sim: --compare %s has none of these scenarios and modes\n", o.compare)
		}
	}
	if o.out != "" {
		if err := writeResults(o, specs, rows); err != nil {
			return err
		}
		fmt.Fprintf(s.err, "sim: wrote plots and results.md to %s\n", o.out)
	}
	if o.format == "json" {
		return sim.WriteJSON(s.out, rows)
	}
	return sim.WriteTable(s.out, rows)
}

func writePlots(dir string, spec *sim.Spec, runs []*sim.Result) error {
	for _, format := range []string{sim.PNG, sim.SVG} {
		var buf bytes.Buffer
		if err := sim.WritePlot(&buf, format, spec, runs); err != nil {
			return err
		}
		path := filepath.Join(dir, spec.Name+"."+format)
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			return fmt.Errorf("write plot: %w", err)
		}
	}
	return nil
}

func writeResults(o simOptions, specs []*sim.Spec, rows []sim.Row) error {
	cmdline := fmt.Sprintf("allot sim --scenario %s --seed %d --seeds %d --network %s --out %s", o.scenario, o.seed, o.seeds, o.network, o.out)
	if o.lease > 0 {
		cmdline += " --lease " + o.lease.String()
	}
	if o.compare != "" {
		cmdline += " --compare " + o.compare
	}
	var desc strings.Builder
	for _, s := range specs {
		fmt.Fprintf(&desc, "- `%s`: %s; %s.\n", s.Name, s.Description, sim.Describe(s))
	}
	pre := fmt.Sprintf("# Simulator results\n\nWritten by `%s` (deterministic: the same command prints the same numbers).\n\nScenarios:\n\n%s",
		cmdline, desc.String())
	var buf bytes.Buffer
	if err := sim.WriteMarkdown(&buf, rows, strings.TrimSpace(pre)); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.out, "results.md"), buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write results.md: %w", err)
	}
	return nil
}
