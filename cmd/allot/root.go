package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit codes (part of the CLI's fixed contract).
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// usageError marks an error as the caller's: a bad flag, argument or value.
// It exits with code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef returns a usage error (exit code 2).
func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// streams carries the command's output writers to every subcommand.
type streams struct {
	out, err io.Writer
}

// commandFactory builds one subcommand. Each subcommand's file registers its
// factory in an init function, so adding a command touches no other file.
type commandFactory func(s *streams) *cobra.Command

var factories []commandFactory

func register(f ...commandFactory) { factories = append(factories, f...) }

// newRoot builds the command tree.
func newRoot(s *streams) *cobra.Command {
	root := &cobra.Command{
		Use:   "allot",
		Short: "Multi-region rate-limit budget coordinator",
		Long: `allot splits one global rate budget per tenant across regions. Each region
enforces its share locally with GCRA against its own Redis; a coordinator,
elected through etcd, rewrites the shares every few seconds from the traffic
each region observed, so the world admits what one global limiter would.

Every flag can also be set in the environment as ALLOT_<FLAG>, e.g.
ALLOT_REDIS for --redis. Exit codes: 0 ok, 1 failure, 2 usage.`,
		Example: `  allot dev --traffic                      # everything in one process, with demo traffic
  allot budget set t42 --rate 1000/s --burst 200
  allot regional --region us-east --redis 127.0.0.1:6379 --etcd http://127.0.0.1:2379
  allot sim --scenario skew-shift
  allot <command> --help`,
		SilenceUsage:      true,
		SilenceErrors:     true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return applyEnv(cmd.Flags())
		},
	}
	root.SetOut(s.out)
	root.SetErr(s.err)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	for _, f := range factories {
		c := f(s)
		wrapArgs(c)
		root.AddCommand(c)
	}
	return root
}

// wrapArgs makes argument-count errors usage errors, recursively.
func wrapArgs(c *cobra.Command) {
	if c.Args != nil {
		check := c.Args
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := check(cmd, args); err != nil {
				return usageError{fmt.Errorf("%w (run '%s --help' for usage)", err, cmd.CommandPath())}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		wrapArgs(sub)
	}
}

// envName is the environment variable that sets a flag: ALLOT_ and the flag's
// name in upper case with dashes as underscores.
func envName(flag string) string {
	return "ALLOT_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// applyEnv sets every flag not given on the command line from its
// environment variable, if set.
func applyEnv(fs *pflag.FlagSet) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == "help" {
			return
		}
		v, ok := os.LookupEnv(envName(f.Name))
		if !ok {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, usagef("environment %s=%q (flag --%s): %v", envName(f.Name), v, f.Name, err))
		}
	})
	return errors.Join(errs...)
}

// run executes the CLI with args and returns the error to report.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	root := newRoot(&streams{out: stdout, err: stderr})
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err != nil && strings.HasPrefix(err.Error(), "unknown command") {
		return usageError{err}
	}
	return err
}

// exitCode prints err (if any) and returns the process exit code.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, "allot:", err)
	var ue usageError
	if errors.As(err, &ue) {
		return exitUsage
	}
	return exitFailure
}
