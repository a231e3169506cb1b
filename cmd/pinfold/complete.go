package main

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// completeNames completes a command's first argument with names the
// planner knows (hosts, services, instances), asked with a 2 s limit; with
// the planner unreachable it offers nothing rather than failing.
func completeNames(c *clientFlags, hosts, services, instances bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		cl, err := c.client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var out []string
		if hosts {
			if hosts, err := allHosts(ctx, cl); err == nil {
				for _, h := range hosts {
					out = append(out, h.Name)
				}
			}
		}
		if services || instances {
			if ins, err := allInstances(ctx, cl, "", ""); err == nil {
				for _, in := range ins {
					if services {
						out = append(out, in.Service)
					}
					if instances {
						out = append(out, in.Id)
					}
				}
			}
		}
		slices.Sort(out)
		out = slices.Compact(out)
		out = slices.DeleteFunc(out, func(s string) bool { return !strings.HasPrefix(s, toComplete) })
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
