package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at build time: -ldflags "-X main.version=v0.1.0".
var version = "dev"

func init() { register(newVersionCmd) }

type versionInfo struct {
	Version string `json:"version"`
	Commit  string `json:"commit,omitempty"`
	Go      string `json:"go"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
}

func buildInfo() versionInfo {
	v := versionInfo{Version: version, Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				v.Commit = s.Value
			}
		}
	}
	return v
}

func newVersionCmd(s *streams) *cobra.Command {
	var output string
	c := &cobra.Command{
		Use:   "version",
		Short: "Print the version of allot",
		Example: `  allot version
  allot version --output json`,
		Args: cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			v := buildInfo()
			switch output {
			case "json":
				enc := json.NewEncoder(s.out)
				return enc.Encode(v)
			case "text":
				commit := v.Commit
				if commit == "" {
					commit = "unknown"
				}
				_, err := fmt.Fprintf(s.out, "allot %s (commit %s, %s, %s/%s)\n", v.Version, commit, v.Go, v.OS, v.Arch)
				return err
			default:
				return usagef("--output %q: want text or json", output)
			}
		},
	}
	c.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return c
}
