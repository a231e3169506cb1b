package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/pinfold/pinfold/planner/api/pinfoldv1/pinfoldv1connect"
)

// DefaultPlanner is where the planner listens unless told otherwise.
const DefaultPlanner = "127.0.0.1:7878"

// clientFlags are the flags of every command that talks to a planner.
type clientFlags struct {
	addr            string
	tlsCA           string
	tlsCert, tlsKey string
}

func (c *clientFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&c.addr, "planner", envOr("PINFOLD_PLANNER", DefaultPlanner), "planner address (host:port, http:// or https:// URL; env PINFOLD_PLANNER)")
	cmd.Flags().StringVar(&c.tlsCA, "tls-ca", os.Getenv("PINFOLD_TLS_CA"), "CA certificate to verify an https:// planner (env PINFOLD_TLS_CA)")
	cmd.Flags().StringVar(&c.tlsCert, "tls-cert", os.Getenv("PINFOLD_TLS_CERT"), "client certificate for a planner that requires one, PEM (env PINFOLD_TLS_CERT; pinfold pki issue makes one)")
	cmd.Flags().StringVar(&c.tlsKey, "tls-key", os.Getenv("PINFOLD_TLS_KEY"), "private key of --tls-cert, PEM (env PINFOLD_TLS_KEY)")
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func (c *clientFlags) client() (pinfoldv1connect.PlannerServiceClient, error) {
	hc, err := c.httpClient()
	if err != nil {
		return nil, err
	}
	return pinfoldv1connect.NewPlannerServiceClient(hc, strings.TrimSuffix(c.baseURL(), "/")), nil
}

// baseURL is the planner's address as a URL (http:// when none is given).
func (c *clientFlags) baseURL() string {
	if !strings.Contains(c.addr, "://") {
		return "http://" + c.addr
	}
	return c.addr
}

// httpClient is an HTTP client for the planner, with the TLS flags.
func (c *clientFlags) httpClient() (*http.Client, error) {
	base := c.baseURL()
	hc := &http.Client{Timeout: 5 * time.Minute}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		return nil, badInput("--tls-cert and --tls-key go together")
	}
	if strings.HasPrefix(base, "https://") {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if c.tlsCA != "" {
			pool, err := loadCA("--tls-ca", c.tlsCA)
			if err != nil {
				return nil, err
			}
			tc.RootCAs = pool
		}
		if c.tlsCert != "" {
			cert, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
			if err != nil {
				return nil, badInput("--tls-cert/--tls-key: %v", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		hc.Transport = &http.Transport{TLSClientConfig: tc}
	}
	return hc, nil
}

// call connects to the planner and runs f, mapping the API errors it
// returns onto the CLI's exit codes (see apiError).
func (c *clientFlags) call(f func(cl pinfoldv1connect.PlannerServiceClient) error) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	return apiError(f(cl))
}

// apiError turns an API error into the CLI's exit codes: invalid input,
// unknown or duplicate names and precondition failures are exit 2 (nothing
// was changed); capacity shortages are exit 1; an unreachable planner is 1.
func apiError(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err
	}
	msg := ce.Message()
	switch ce.Code() {
	case connect.CodeInvalidArgument, connect.CodeNotFound, connect.CodeAlreadyExists, connect.CodeFailedPrecondition:
		return &exitError{code: exitBadInput, err: errors.New(msg)}
	case connect.CodeResourceExhausted:
		return &exitError{code: exitUnmet, err: fmt.Errorf("not placed: %s", msg)}
	case connect.CodeUnavailable:
		return &exitError{code: exitUnreachable, err: fmt.Errorf("planner unreachable (is `pinfold planner` running?): %s", msg)}
	}
	return &exitError{code: exitUnmet, err: fmt.Errorf("%s: %s", ce.Code(), msg)}
}

// parseSize reads a byte size: a plain number is bytes; K, M, G, T (and
// KB, MB, GB, TB) are powers of 1000; Ki, Mi, Gi, Ti (and KiB, MiB, GiB,
// TiB) are powers of 1024. Decimals are allowed ("1.5GiB"). With signed,
// a leading + or - is allowed (for deltas).
func parseSize(flag, s string, signed bool) (int64, error) {
	in := strings.TrimSpace(s)
	sign := int64(1)
	if signed && (strings.HasPrefix(in, "+") || strings.HasPrefix(in, "-")) {
		if in[0] == '-' {
			sign = -1
		}
		in = in[1:]
	}
	i := 0
	for i < len(in) && (in[i] >= '0' && in[i] <= '9' || in[i] == '.') {
		i++
	}
	num, unit := in[:i], strings.TrimSpace(in[i:])
	mult := map[string]float64{"": 1, "B": 1,
		"K": 1e3, "KB": 1e3, "M": 1e6, "MB": 1e6, "G": 1e9, "GB": 1e9, "T": 1e12, "TB": 1e12,
		"Ki": 1 << 10, "KiB": 1 << 10, "Mi": 1 << 20, "MiB": 1 << 20, "Gi": 1 << 30, "GiB": 1 << 30, "Ti": 1 << 40, "TiB": 1 << 40}
	m, ok := mult[unit]
	if num == "" || strings.Count(num, ".") > 1 || !ok {
		return 0, badInput("%s %q: want a size such as 512MiB, 1.5GiB or 1G (K/M/G/T = 1000s, Ki/Mi/Gi/Ti = 1024s)", flag, s)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f*m > math.MaxInt64/2 {
		return 0, badInput("%s %q: not a size pinfold can hold", flag, s)
	}
	return sign * int64(math.Round(f*m)), nil
}

// parseCPU checks a decimal CPU amount ("1.7", "+0.5", "-0.3") before it
// is sent; the planner rounds it to pieces.
// parseCPUAndMemory parses an instance size: --cpu and --memory.
func parseCPUAndMemory(cpu, memory string) (string, int64, error) {
	c, err := parseCPU("--cpu", cpu, false)
	if err != nil {
		return "", 0, err
	}
	m, err := parseSize("--memory", memory, false)
	return c, m, err
}

func parseCPU(flag, s string, signed bool) (string, error) {
	t := strings.TrimSpace(s)
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || (!signed && f < 0) || (!signed && strings.HasPrefix(t, "+")) {
		what := "a number of CPUs such as 1.7"
		if signed {
			what = "a signed number of CPUs such as +0.7 or -0.5"
		}
		return "", badInput("%s %q: want %s", flag, s, what)
	}
	return strings.TrimPrefix(t, "+"), nil
}

// loadCA reads the PEM certificates in path (given as flag) into a pool.
func loadCA(flag, path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, badInput("%s %q: no readable PEM certificate: %v", flag, path, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, badInput("%s %q: no readable PEM certificate in it", flag, path)
	}
	return pool, nil
}

// fileExists reports whether path names an existing file.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
