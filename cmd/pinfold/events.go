package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

// eventJSON is one event of the log.
type eventJSON struct {
	ID       string `json:"id"`
	Time     string `json:"time"`
	Identity string `json:"identity"`
	Kind     string `json:"kind"`
	Subject  string `json:"subject"`
	Host     string `json:"host,omitempty"`
	Service  string `json:"service,omitempty"`
	Request  string `json:"request,omitempty"`
	Outcome  string `json:"outcome"`
}

func toEventJSON(e *pinfoldv1.Event) eventJSON {
	return eventJSON{ID: e.Id, Time: e.Time, Identity: e.Identity, Kind: e.Kind, Subject: e.Subject, Host: e.Host, Service: e.Service,
		Request: e.Request, Outcome: e.Outcome}
}

func newEventsCmd() *cobra.Command {
	var (
		c             clientFlags
		out           outputFlag
		follow        bool
		service, host string
		limit         int
		every         time.Duration
		requestsShown bool
	)
	cmd := &cobra.Command{
		Use:   "events [--follow] [--service S] [--host H] [-o json]",
		Short: "Show who changed what: deploys, resizes, host changes, drains, healing, refusals",
		Long: `Show the newest events of the cluster's log (--limit of them, 1000 when 0),
oldest first: every request that may change the cluster (deploy, resize,
replace, remove, scale, host add/set/enable/disable/maintenance/drain/
remove, settings, rebalance) with the caller's identity
(the client certificate's role and name; "local" when the planner runs
without TLS) and its outcome, and what the planner did on its own (Heal:
a dead host's instance placed again; DrainMove, MoveSettled) and what
agents refused (Refused). The planner keeps the newest --events-keep events
(10000) for at most --events-max-age (7 days).

--follow keeps printing new events as they come (every --every, up to --limit
per read).`,
		Example: `  pinfold events
  pinfold events --service web
  pinfold events --host h3 --follow
  pinfold events -o json --limit 50`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			if limit < 0 || limit > 1000 {
				return badInput("--limit %d: want 0 (all, up to 1000) ..1000", limit)
			}
			if every < 100*time.Millisecond {
				return badInput("--every %s: want at least 100ms", every)
			}
			return c.call(func(cl pinfoldv1connect.PlannerServiceClient) error {
				after := ""
				first := true
				w := cmd.OutOrStdout()
				for {
					resp, err := cl.ListEvents(cmd.Context(), connect.NewRequest(&pinfoldv1.ListEventsRequest{Service: service, Host: host, After: after, Limit: int32(limit), Latest: first}))
					if err != nil {
						return err
					}
					evs := resp.Msg.Events
					switch {
					case out.json() && !follow:
						list := []eventJSON{}
						for _, e := range evs {
							list = append(list, toEventJSON(e))
						}
						return writeJSON(w, list)
					case out.json(): // one document per event while following
						for _, e := range evs {
							if err := writeEvent(w, toEventJSON(e)); err != nil {
								return err
							}
						}
					default:
						tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
						if first {
							fmt.Fprintln(tw, "TIME\tIDENTITY\tKIND\tSUBJECT\tHOST\tOUTCOME")
						}
						for _, e := range evs {
							t, _ := time.Parse(time.RFC3339Nano, e.Time)
							fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.Local().Format("2006-01-02 15:04:05"), e.Identity, e.Kind, orDash(e.Subject), orDash(e.Host), oneLine(e.Outcome))
							if requestsShown && e.Request != "" {
								fmt.Fprintf(tw, "\t\t\t\t\trequest %s\n", e.Request)
							}
						}
						if err := tw.Flush(); err != nil {
							return err
						}
					}
					if len(evs) > 0 {
						after = evs[len(evs)-1].Id
					}
					first = false
					if !follow {
						return nil
					}
					select {
					case <-cmd.Context().Done():
						return nil
					case <-time.After(every):
					}
				}
			})
		},
	}
	c.register(cmd)
	out.register(cmd)
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new events")
	cmd.Flags().StringVar(&service, "service", "", "only events of this service (and its instances)")
	cmd.Flags().StringVar(&host, "host", "", "only events of this host")
	cmd.Flags().IntVar(&limit, "limit", 0, "the newest this many events (0: 1000); with --follow, then every new one")
	cmd.Flags().DurationVar(&every, "every", time.Second, "with --follow: how often to look for new events")
	cmd.Flags().BoolVar(&requestsShown, "requests", false, "also print each request (JSON)")
	return cmd
}

// writeEvent writes one event as a JSON line, or a YAML document.
func writeEvent(w io.Writer, e eventJSON) error {
	if _, ok := w.(yamlOut); ok {
		return writeJSON(w, e)
	}
	return json.NewEncoder(w).Encode(e)
}

// oneLine folds a multi-line text (an elimination report in a refusal) into
// one table cell: its lines joined by " | ", each trimmed.
func oneLine(s string) string {
	if !strings.Contains(s, "\n") {
		return s
	}
	var parts []string
	for l := range strings.Lines(s) {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, " | ")
}
