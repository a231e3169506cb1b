package main

import (
	"strings"
	"testing"
)

// TestTLSRefusalsSayWhy: what a user of a TLS planner meets first (found
// by a new user's trial): a bare host:port with a CA given goes to
// https:// (it got "internal error … 400 Bad Request", exit 4); a client
// certificate the planner refuses (here: none) is said to be refused, not
// "the connection was lost … worth a retry", and so is a --tls-ca that does
// not verify the planner: configuration, exit 2 (it was 3, "worth a
// retry", which cannot help: issue 38 item 7); a role that may not make a
// change is told which certificate may (exit 5, its own code).
func TestTLSRefusalsSayWhy(t *testing.T) {
	as, addr, ca := tlsPlanner(t, 0, 0)
	admin, viewer := as("admin", "alice"), as("viewer", "bob")
	if out, errOut, code := admin.Run("host", "list"); code != 0 {
		t.Fatalf("host list as admin: exit %d, %s%s", code, out, errOut)
	}
	for _, tc := range []struct {
		name     string
		run      func() (string, string, int)
		wantCode int
		want     string
	}{
		{"a bare host:port with --tls-ca is https", func() (string, string, int) {
			return runCLI(t, "", "host", "list", "--planner", addr, "--tls-ca", ca)
		}, exitBadInput, "the planner requires a TLS client certificate and this command gave none"},
		{"another CA in --tls-ca", func() (string, string, int) {
			other := t.TempDir() + "/other"
			runCLI(t, "", "pki", "init", "--dir", other)
			return runCLI(t, "", "host", "list", "--planner", addr, "--tls-ca", other+"/ca.pem")
		}, exitBadInput, "the planner's TLS certificate does not verify against --tls-ca"},
		{"http:// to a TLS planner", func() (string, string, int) {
			return runCLI(t, "", "host", "list", "--planner", "http://"+addr)
		}, exitBadInput, "the planner speaks https (TLS), and this command sent plain http"},
		{"a viewer's change", func() (string, string, int) {
			return viewer.Run("deploy", "web", "--cpu", "0.1", "--memory", "64MiB", "--image", "busybox")
		}, exitDenied, "permission denied: identity viewer:bob may not call Deploy (the certificate's role does not allow it: an admin certificate does"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := tc.run()
			if code != tc.wantCode || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr %q (stdout %q); want exit %d and %q", code, errOut, out, tc.wantCode, tc.want)
			}
		})
	}
}
