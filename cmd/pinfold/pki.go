package main

import (
	"fmt"
	"text/tabwriter"
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
written 0600; nothing is ever overwritten (renew keeps the old pair).

revoke adds a certificate to revoked.crl, a CRL the CA signs, beside
ca.pem; a running planner reads it again when it changes and refuses a
revoked certificate from its next TLS handshake on, no restart needed.
renew replaces the planner's own certificate; a running planner serves
the new one from its next handshake on. list shows the client
certificates and which are revoked.`,
		Example: `  pinfold pki init --dir /etc/pinfold/pki --host planner.example.com --host 10.0.0.5
  pinfold pki issue agent node17 --dir /etc/pinfold/pki
  pinfold pki issue admin alice --dir /etc/pinfold/pki -o json
  pinfold pki revoke node17 --dir /etc/pinfold/pki
  pinfold pki renew --dir /etc/pinfold/pki
  pinfold planner --listen :7878 --tls-cert /etc/pinfold/pki/planner.pem \
      --tls-key /etc/pinfold/pki/planner-key.pem --tls-ca /etc/pinfold/pki/ca.pem`,
	}
	cmd.AddCommand(newPKIInitCmd(), newPKIIssueCmd(), newPKIRevokeCmd(), newPKIListCmd(), newPKIRenewCmd())
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

func newPKIRevokeCmd() *cobra.Command {
	var (
		dir     string
		serials []string
		out     outputFlag
	)
	cmd := &cobra.Command{
		Use:   "revoke [NAME] [--serial HEX …] --dir DIR",
		Short: "Revoke client certificates: a running planner refuses them from its next handshake on",
		Long: `Revoke every client certificate in DIR issued to NAME (all its roles), and
every certificate whose serial is given (pinfold pki list shows them; a
serial also revokes a certificate whose files are gone). The serials go into
DIR/revoked.crl, an X.509 CRL signed by the CA (it needs DIR/ca-key.pem). A
planner whose --tls-ca is DIR/ca.pem reads the list again when it changes:
a revoked certificate's next TLS handshake fails, without a restart, and
the connections it holds open (watch and follow streams included) are
closed within a few seconds (a client then reads that the planner refused
its certificate).

Revoking a revoked certificate changes nothing and says so. To give NAME a
new certificate, move its old files aside and pki issue again.`,
		Example: `  pinfold pki revoke node17 --dir /etc/pinfold/pki
  pinfold pki revoke --serial 3f2a9c… --dir /etc/pinfold/pki -o json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			if dir == "" {
				return badInput("--dir is required")
			}
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			if name == "" && len(serials) == 0 {
				return badInput("give a NAME or --serial (pinfold pki list --dir %s shows them)", dir)
			}
			rs, err := pki.Revoke(dir, name, serials, time.Now())
			if err != nil {
				return badInput("%v", err)
			}
			if out.json() {
				return writeJSON(cmd.OutOrStdout(), rs)
			}
			for _, r := range rs {
				what := "revoked"
				if r.Already {
					what = "already revoked (unchanged)"
				}
				who := "serial " + r.Serial
				if r.Name != "" {
					who = fmt.Sprintf("%s (serial %s, %s)", r.Identity, r.Serial, r.File)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", who, what)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the directory pki init made")
	cmd.Flags().StringArrayVar(&serials, "serial", nil, "a certificate serial, hexadecimal (repeatable)")
	out.register(cmd)
	return cmd
}

func newPKIListCmd() *cobra.Command {
	var (
		dir string
		out outputFlag
	)
	cmd := &cobra.Command{
		Use:     "list --dir DIR",
		Short:   "List the client certificates in DIR and which are revoked",
		Example: `  pinfold pki list --dir /etc/pinfold/pki`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			if dir == "" {
				return badInput("--dir is required")
			}
			cs, err := pki.List(dir)
			if err != nil {
				return badInput("%v", err)
			}
			if out.json() {
				if cs == nil {
					cs = []pki.Cert{}
				}
				return writeJSON(cmd.OutOrStdout(), cs)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tROLE\tSERIAL\tEXPIRES\tREVOKED")
			for _, c := range cs {
				rev := "-"
				if c.Revoked {
					rev = c.RevokedAt.UTC().Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Name, c.Role, c.Serial, c.NotAfter.UTC().Format("2006-01-02"), rev)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the directory pki init made")
	out.register(cmd)
	return cmd
}

func newPKIRenewCmd() *cobra.Command {
	var (
		dir   string
		hosts []string
		out   outputFlag
	)
	cmd := &cobra.Command{
		Use:   "renew --dir DIR [--host NAME|IP …]",
		Short: "Replace the planner's certificate; a running planner serves the new one without a restart",
		Long: `Sign a new planner certificate from the CA in DIR, valid for a year and for
the names and IPs of the old one and every --host, and move it over
planner.pem and planner-key.pem (the key first). The old pair stays as
planner.pem.SERIAL.old and planner-key.pem.SERIAL.old. A running planner
serving these files serves the new certificate from its next handshake on.

A certificate made elsewhere works the same way: replace the key file, then
the certificate file (a planner never serves a key and certificate that do
not match: it keeps the old pair, logs why, and tries again at the next
change).`,
		Example: `  pinfold pki renew --dir /etc/pinfold/pki
  pinfold pki renew --dir /etc/pinfold/pki --host planner2.example.com -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(cmd); err != nil {
				return err
			}
			if dir == "" {
				return badInput("--dir is required")
			}
			r, err := pki.Renew(dir, hosts, time.Now())
			if err != nil {
				return badInput("%v", err)
			}
			if out.json() {
				return writeJSON(cmd.OutOrStdout(), r)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "new planner certificate, serial %s:\n  cert: %s\n  key:  %s\nthe old one: %s, %s\n", r.Serial, r.Cert, r.Key, r.Old, r.OldKey)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the directory pki init made")
	cmd.Flags().StringArrayVar(&hosts, "host", nil, "another name or IP the planner is reached at (repeatable)")
	out.register(cmd)
	return cmd
}
