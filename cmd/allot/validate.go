package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/allot-dev/allot/policy"
)

func init() { register(newValidateCmd) }

func newValidateCmd(s *streams) *cobra.Command {
	var files []string
	c := &cobra.Command{
		Use:   "validate -f FILE [-f FILE...]",
		Short: "Check policy files offline (YAML or JSON)",
		Long: `Check policy files offline: strict parsing (unknown fields, duplicate keys and
wrong types are errors) and every rule a coordinator would enforce, with each
problem naming its line and field. Nothing is sent anywhere. Exits 0 when every
file is valid, 1 when any is not. Use - to read standard input.`,
		Example: `  allot validate -f deploy/policy.example.yaml
  cat policy.json | allot validate -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(files) == 0 {
				return usagef("validate: -f FILE is required")
			}
			bad := 0
			for _, f := range files {
				if err := validateFile(cmd.InOrStdin(), f); err != nil {
					bad++
					fmt.Fprintf(s.err, "%s: %v\n", f, err)
					continue
				}
				fmt.Fprintf(s.out, "%s: valid\n", f)
			}
			if bad > 0 {
				return fmt.Errorf("%d of %d policy files invalid", bad, len(files))
			}
			return nil
		},
	}
	c.Flags().StringArrayVarP(&files, "file", "f", nil, "policy file to check (repeatable; - for stdin)")
	return c
}

func validateFile(stdin io.Reader, name string) error {
	var data []byte
	var err error
	if name == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(name)
	}
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	_, err = policy.Parse(data)
	var es policy.Errors
	if errors.As(err, &es) && len(es) > 1 {
		return es
	}
	return err
}
