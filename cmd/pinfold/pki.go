package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/pinfold/pinfold/planner/pki"
)

func newPKICmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pki",
		Short: "Make the certificates a secure planner, its agents and its users need",
		Long: `A small certificate authority for one pinfold cluster. init makes the CA and
the planner's server certificate; issue makes a client certificate whose
subject carries an identity: its name in CommonName and its role in
OrganizationalUnit (pinfold:admin, pinfold:viewer or pinfold:agent). The
planner, started with --tls-cert/--tls-key/--tls-ca, lets an admin do
everything, a viewer read, and an agent register, heartbeat, watch and
report only for the host its certificate names. Keys are ECDSA P-256,
written 0600; nothing is ever overwritten.`,
		Example: `  pinfold pki init --dir /etc/pinfold/pki --host planner.example.com --host 10.0.0.5
  pinfold pki issue agent node17 --dir /etc/pinfold/pki
  pinfold pki issue admin alice --dir /etc/pinfold/pki -o json
  pinfold planner --listen :7878 --tls-cert /etc/pinfold/pki/planner.pem \
      --tls-key /etc/pinfold/pki/planner-key.pem --tls-ca /etc/pinfold/pki/ca.pem`,
	}
	cmd.AddCommand(newPKIInitCmd(), newPKIIssueCmd())
	return cmd
}

func printFiles(cmd *cobra.Command, out outputFlag, what string, f pki.Files) error {
	if out.json() {
		return writeJSON(cmd.OutOrStdout(), f)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s\n  ca:   %s\n  cert: %s\n  key:  %s\n", what, f.CA, f.Cert, f.Key)
	return nil
}

func newPKIInitCmd() *cobra.Command {
	var (
		dir   string
		hosts []string
		out   outputFlag
	)
	cmd := &cobra.Command{
		Use:   "init --dir DIR [--host NAME|IP …]",
		Short: "Create a CA and the planner's server certificate",
		Example: `  pinfold pki init --dir ./pki
  pinfold pki init --dir /etc/pinfold/pki --host planner.example.com --host 10.0.0.5 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			if dir == "" {
				return badInput("--dir is required")
			}
			f, err := pki.Init(dir, hosts, time.Now())
			if err != nil {
				return badInput("%v", err)
			}
			return printFiles(cmd, out, "CA and planner certificate (valid for localhost, 127.0.0.1, ::1 and every --host):", f)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory for the CA and certificates (created 0700)")
	cmd.Flags().StringArrayVar(&hosts, "host", nil, "a name or IP the planner is reached at (repeatable)")
	out.register(cmd)
	return cmd
}

func newPKIIssueCmd() *cobra.Command {
	var (
		dir string
		out outputFlag
	)
	cmd := &cobra.Command{
		Use:   "issue (agent|admin|viewer) NAME --dir DIR",
		Short: "Issue a client certificate: an agent for host NAME, or an admin or viewer named NAME",
		Example: `  pinfold pki issue agent node17 --dir ./pki
  pinfold pki issue viewer dashboards --dir ./pki -o json`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			if dir == "" {
				return badInput("--dir is required")
			}
			f, err := pki.Issue(dir, pki.Role(args[0]), args[1], time.Now())
			if err != nil {
				return badInput("%v", err)
			}
			return printFiles(cmd, out, fmt.Sprintf("%s certificate for %s:", args[0], args[1]), f)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the directory pki init made")
	out.register(cmd)
	return cmd
}
