package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestEveryCommandTeaches: every command a user runs has examples in its
// --help, and no help text speaks of the project's sources instead of the
// user's terms; no flag's usage is garbled by cobra's back-quote rule (a
// back-quoted word in a usage becomes the flag's value name).
func TestEveryCommandTeaches(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" {
				continue
			}
			if sub.Runnable() && strings.TrimSpace(sub.Example) == "" {
				t.Errorf("%q has no examples in its --help", sub.CommandPath())
			}
			text := sub.Short + "\n" + sub.Long
			for _, word := range []string{"seed 0", "seeds 0", "eru", "service fabric", "opensvc"} {
				if strings.Contains(strings.ToLower(text), word) {
					t.Errorf("%q --help speaks of %q: sources belong in docs/", sub.CommandPath(), word)
				}
			}
			sub.Flags().VisitAll(func(f *pflag.Flag) {
				if strings.Count(f.Usage, "`") == 2 {
					name, _ := pflag.UnquoteUsage(f)
					if strings.Contains(name, " ") {
						t.Errorf("%q --%s: back quotes turn %q into the value name", sub.CommandPath(), f.Name, name)
					}
				}
			})
			walk(sub)
		}
	}
	walk(newRootCmd())
}
