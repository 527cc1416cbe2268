package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/allot-dev/allot/internal/dev"
	"github.com/allot-dev/allot/policy"
)

func init() { register(newDevCmd) }

type devOpts struct {
	regions    string
	httpListen string
	redis      string
	policyFile string
	dataDir    string
	traffic    bool
	rebalance  time.Duration
	logLevel   string
}

func newDevCmd(s *streams) *cobra.Command {
	o := devOpts{}
	def := dev.DefaultConfig()
	c := &cobra.Command{
		Use:   "dev [--traffic]",
		Short: "Run the whole system in one process: etcd, a coordinator and every region",
		Long: `Run allot on one machine with nothing else installed: an embedded etcd, one
coordinator and a regional service per region (in-memory store, or a real
Redis per region with --redis). The coordinator's HTTP API and status page are
on --http-listen; each region's HTTP API is under /regions/{region}/ on the
same listener and its gRPC on its own port. Admin writes are open.

--traffic drives skewed, shifting load for the tenant "demo" (1000/s budget)
and shows, every second, what each region offered, admitted and holds.`,
		Example: `  allot dev --traffic
  allot dev --regions us-east,eu-west --http-listen 127.0.0.1:8070
  allot dev --redis us-east=127.0.0.1:6379 --policy deploy/policy.example.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDev(cmd.Context(), s, o) },
	}
	f := c.Flags()
	f.StringVar(&o.regions, "regions", strings.Join(def.Regions, ","), "regions to run, comma-separated")
	f.StringVar(&o.httpListen, "http-listen", def.HTTPListen, "HTTP listen address of the coordinator API and /regions/{region}/")
	f.StringVar(&o.redis, "redis", "", "REGION=ADDR,... use a real Redis for these regions (others: in-memory)")
	f.StringVar(&o.policyFile, "policy", "", "policy file to apply (default: the bundled one: tiers free and pro, limits per tenant and per tenant+user)")
	f.StringVar(&o.dataDir, "data-dir", "", "etcd data directory (default: a temporary one, removed on exit)")
	f.BoolVar(&o.traffic, "traffic", false, "drive skewed, shifting demo traffic and show a live table")
	f.DurationVar(&o.rebalance, "rebalance-interval", def.RebalanceInterval, "rebalance and report interval")
	f.StringVar(&o.logLevel, "log-level", "error", "debug, info, warn or error (logs go to stderr)")
	return c
}

func runDev(ctx context.Context, s *streams, o devOpts) error {
	log, err := newLogger(s, o.logLevel)
	if err != nil {
		return err
	}
	cfg := dev.DefaultConfig()
	cfg.Regions = splitList(o.regions)
	cfg.HTTPListen, cfg.DataDir, cfg.RebalanceInterval, cfg.Logger = o.httpListen, o.dataDir, o.rebalance, log
	if o.redis != "" {
		cfg.Redis = map[string]string{}
		for _, kv := range splitList(o.redis) {
			r, addr, ok := strings.Cut(kv, "=")
			if !ok || r == "" || addr == "" {
				return usagef("--redis %q: want REGION=ADDR[,REGION=ADDR...], e.g. us-east=127.0.0.1:6379", o.redis)
			}
			cfg.Redis[r] = addr
		}
	}
	if o.policyFile != "" {
		b, err := os.ReadFile(o.policyFile)
		if err != nil {
			return usagef("--policy: %v", err)
		}
		if _, err := policy.Parse(b); err != nil {
			return fmt.Errorf("--policy %s: %w", o.policyFile, err)
		}
		cfg.Policy = string(b)
	}
	if err := cfg.Validate(); err != nil {
		return usagef("%v", err)
	}
	fmt.Fprintf(s.err, "allot dev: starting etcd, a coordinator and %d regions...\n", len(cfg.Regions))
	return dev.Run(ctx, cfg, func(cl *dev.Cluster) {
		banner(s.out, cl)
		if o.traffic {
			go demo(ctx, s.out, cl, cfg)
		}
	})
}

func banner(w io.Writer, cl *dev.Cluster) {
	base := "http://" + cl.HTTPAddr
	fmt.Fprintf(w, "\nallot dev is running.\n\n")
	fmt.Fprintf(w, "  coordinator   %s/  (status page; API under /v1/, admin writes open)\n", base)
	fmt.Fprintf(w, "                gRPC %s (allot.v1.Coordinator, allot.v1.Admin)\n", cl.CoordGRPCAddr)
	fmt.Fprintf(w, "  etcd          %s\n", cl.EtcdEndpoint)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, r := range cl.Regions {
		fmt.Fprintf(tw, "  region %s\t%s/regions/%s/v1/decide\tgRPC %s\tstore %s\n", r.Name, base, r.Name, r.GRPCAddr, r.Store)
	}
	_ = tw.Flush()
	r0 := cl.Regions[0].Name
	fmt.Fprintf(w, `
Try:
  allot budget set t1 --rate 5/s --burst 3 --mode pinned --home %[2]s --coordinator %[1]s
  curl -s -XPOST %[1]s/regions/%[2]s/v1/decide -d '{"descriptors":{"tenant":"t1"},"cost":1}'
  curl -si %[1]s/regions/%[2]s/v1/forward-auth -H 'X-Allot-Tenant: t1'
  allot shares t1 --coordinator %[1]s
  allot status --coordinator %[1]s

Ctrl-C stops everything.
`, base, r0)
}

// demo drives the demo tenant and prints a live table every second.
func demo(ctx context.Context, w io.Writer, cl *dev.Cluster, cfg dev.Config) {
	names := make([]string, len(cl.Regions))
	for i, r := range cl.Regions {
		names[i] = r.Name
	}
	const budget = 1000.0
	load := &dev.Load{Tenant: "demo", Rates: dev.Skewed(names, 1.5*budget, 30*time.Second)}
	go load.Run(ctx, cl.Regions)
	tty := false
	if f, ok := w.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	prev := load.Counts()
	lines := 0
	t := time.NewTicker(time.Second)
	defer t.Stop()
	start := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cur := load.Counts()
		v, err := cl.Coordinator.Shares(ctx, "demo", "")
		if err != nil {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "demo tenant: budget %.0f/s, offered %.0f/s (70/20/10, rotating every 30s) — t=%ds\n",
			budget, 1.5*budget, int(time.Since(start).Seconds()))
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "REGION\tOFFERED/s\tADMITTED/s\tGRANT/s\tDEMAND/s\tLEASE\t")
		var sumAdm float64
		for i, r := range cl.Regions {
			off := float64(cur[r.Name][0] - prev[r.Name][0])
			adm := float64(cur[r.Name][1] - prev[r.Name][1])
			sumAdm += adm
			sh := v.Regions[i]
			lease := "lapsed: floors"
			if r.Service.Leased() {
				lease = "valid"
			}
			fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.1f\t%.1f\t%s\t\n", r.Name, off, adm, sh.Rate, sh.Demand, lease)
		}
		fmt.Fprintf(tw, "world\t\t%.0f\t%.0f\t\t\t\n", sumAdm, budget)
		_ = tw.Flush()
		out := b.String()
		if tty && lines > 0 {
			fmt.Fprintf(w, "\033[%dA\033[J", lines)
		}
		fmt.Fprint(w, out)
		lines = strings.Count(out, "\n")
		prev = cur
	}
}
