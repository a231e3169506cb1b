package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/spf13/cobra"
)

// TestWatchJSONIsOneDocumentPerLine: `ps --watch -o json` (and host
// list's) writes each redraw as one JSON document on one line, nothing
// between them, so that a script reads the stream line by line (issue 38:
// it wrote indented arrays separated by blank lines); a table keeps its
// blank line between redraws. Control: without lineJSON the JSON case
// gets 24 lines, not 3.
func TestWatchJSONIsOneDocumentPerLine(t *testing.T) {
	for _, tc := range []struct {
		format string
		check  func(t *testing.T, out string)
	}{
		{"json", func(t *testing.T, out string) {
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != 3 {
				t.Fatalf("%d lines, want 3 (one document a redraw):\n%s", len(lines), out)
			}
			for _, l := range lines {
				var v []map[string]int
				if err := json.Unmarshal([]byte(l), &v); err != nil || len(v) != 2 {
					t.Errorf("line %q: %v, want a document of 2 entries", l, err)
				}
			}
		}},
		{"table", func(t *testing.T, out string) {
			if want := "a 1\n\na 1\n\na 1\n"; out != want {
				t.Errorf("table redraws %q, want %q", out, want)
			}
		}},
	} {
		t.Run(tc.format, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var buf bytes.Buffer
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				cmd := &cobra.Command{}
				cmd.SetContext(ctx)
				cmd.SetOut(&buf)
				w, out := watchFlag{on: true, every: time.Second}, outputFlag{format: tc.format}
				shown := 0
				err := w.run(cmd, out, func() error {
					if shown++; shown == 3 {
						cancel()
					}
					if out.json() {
						return writeJSON(cmd.OutOrStdout(), []map[string]int{{"a": 1}, {"b": 2}})
					}
					_, err := cmd.OutOrStdout().Write([]byte("a 1\n"))
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				tc.check(t, buf.String())
			})
		})
	}
}
