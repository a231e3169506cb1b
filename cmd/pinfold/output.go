package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/spf13/cobra"
)

// outputFlag is the -o flag every command that prints data has.
type outputFlag struct{ format string }

func (o *outputFlag) register(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.format, "output", "o", "table", "output format: table (for people), json or yaml (for scripts)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
}

// validate is called before any work is done, so a bad -o changes nothing.
// With yaml, the command's output turns what it writes with writeJSON into
// YAML (the same fields, in the same shape).
func (o *outputFlag) validate(cmd *cobra.Command) error {
	switch o.format {
	case "table", "json":
		return nil
	case "yaml":
		if _, ok := cmd.OutOrStdout().(yamlOut); !ok {
			cmd.SetOut(yamlOut{cmd.OutOrStdout()})
		}
		return nil
	}
	return badInput("--output %q: want table, json or yaml", o.format)
}

// json reports whether the output is for scripts (JSON or YAML).
func (o *outputFlag) json() bool { return o.format == "json" || o.format == "yaml" }

// yamlOut marks a command output that wants YAML documents.
type yamlOut struct{ io.Writer }

// lineJSON marks a command output that wants each JSON document on one
// line (--watch -o json: a stream a script reads line by line).
type lineJSON struct{ io.Writer }

// writeJSON writes v as indented JSON, or as a YAML document when w wants
// YAML (-o yaml): one shape for both.
func writeJSON(w io.Writer, v any) error {
	if y, ok := w.(yamlOut); ok {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		out, err := yaml.JSONToYAML(b)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(y.Writer, "---\n%s", out)
		return err
	}
	enc := json.NewEncoder(w)
	if _, ok := w.(lineJSON); !ok {
		enc.SetIndent("", "  ")
	}
	return enc.Encode(v)
}

// formatBytes renders a byte count with binary units for tables.
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	v := float64(n) / unit
	i := 0
	for v >= unit && i < len(units)-1 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

// instances is "1 instance" or "N instances".
func instances(n int) string {
	if n == 1 {
		return "1 instance"
	}
	return fmt.Sprintf("%d instances", n)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// watchFlag is --watch and --interval: redraw a listing until Ctrl-C.
type watchFlag struct {
	on    bool
	every time.Duration
}

func (f *watchFlag) register(cmd *cobra.Command) {
	cmd.Flags().BoolVarP(&f.on, "watch", "w", false, "redraw every --interval until Ctrl-C (-o json: one JSON document per line per redraw)")
	cmd.Flags().DurationVar(&f.every, "interval", 2*time.Second, "with --watch: how often to redraw")
}

func (f *watchFlag) validate() error {
	if f.every < 100*time.Millisecond {
		return badInput("--interval %s: want at least 100ms", f.every)
	}
	return nil
}

// run calls show once, or with --watch every interval until the command's
// context ends, clearing a terminal before each redraw (elsewhere a blank
// line separates them). For scripts (out is json or yaml) each redraw is
// one document: one JSON line, or a YAML document, nothing between them.
func (f *watchFlag) run(cmd *cobra.Command, out outputFlag, show func() error) error {
	if f.on && out.format == "json" {
		if _, ok := cmd.OutOrStdout().(lineJSON); !ok {
			cmd.SetOut(lineJSON{cmd.OutOrStdout()})
		}
	}
	for first := true; ; first = false {
		if f.on && !out.json() {
			w := cmd.OutOrStdout()
			if file, ok := w.(*os.File); ok && isTerminal(file) {
				fmt.Fprint(w, "\033[H\033[2J")
				fmt.Fprintf(w, "every %s: %s\n\n", f.every, time.Now().Format("15:04:05"))
			} else if !first {
				fmt.Fprintln(w)
			}
		}
		if err := show(); err != nil || !f.on {
			return err
		}
		select {
		case <-cmd.Context().Done():
			return nil
		case <-time.After(f.every):
		}
	}
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// counted is n and noun, plural unless n is 1: "1 instance", "3 hosts".
// cpusOf is a CPU count as typed, with its noun: "1 CPU", "1.5 CPUs".
func cpusOf(cpu string) string {
	if cpu == "1" {
		return "1 CPU"
	}
	return cpu + " CPUs"
}

func counted(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// cutText is s cut to n bytes, marked when cut.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// signed is a delta with its sign: "+0.5", "-1".
func signed(s string) string {
	if strings.HasPrefix(s, "-") {
		return s
	}
	return "+" + s
}
