package service

import (
	"encoding/base64"
	"strings"

	"github.com/pinfold/pinfold/planner/state"
)

// Page tokens are opaque to clients: base64url (no padding) of a kind
// ("h" for hosts; for instances "i" with the listing's host and service
// filters, \x01-separated, so that a token serves only the listing that
// made it) and the key of the last entry of the page before,
// NUL-separated: "h\x00NAME" or "i\x01HOST\x01SERVICE\x00HOST\x00ID". A listing
// continues strictly after that key, so that hosts or instances added or
// removed between pages neither repeat nor skip the others.
const (
	hostToken     = "h"
	instanceToken = "i"
)

func encodeToken(kind string, key ...string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(kind + "\x00" + strings.Join(key, "\x00")))
}

// decodeToken is the n fields of a token of kind ("" : none, the first
// page).
func decodeToken(token, kind string, n int) ([]string, error) {
	if token == "" {
		return make([]string, n), nil
	}
	bad := func(why string) error {
		return errf(Invalid, "page_token = %q: %s; pass the next_page_token of the page before, or none for the first page", clip(token), why)
	}
	if len(token) > MaxPageTokenLen {
		return nil, bad("longer than any page token")
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return nil, bad("not a page token")
	}
	parts := strings.Split(string(b), "\x00")
	if len(parts) != n+1 || parts[0] != kind {
		return nil, bad("not a page token of this listing")
	}
	for _, p := range parts[1:] {
		if p == "" {
			return nil, bad("not a page token of this listing")
		}
	}
	return parts[1:], nil
}

// checkPageSize is the page size n asks for: DefaultPageSize for 0.
func checkPageSize(n int) (int, error) {
	switch {
	case n == 0:
		return DefaultPageSize, nil
	case n < 0 || n > MaxPageSize:
		return 0, errf(Invalid, "page_size = %d: want 0 (the default, %d) to %d", n, DefaultPageSize, MaxPageSize)
	}
	return n, nil
}

// HostsPage returns up to pageSize hosts (0: DefaultPageSize) sorted by
// name, starting after the page token ("": the first page), and the token
// of the next page ("" after the last). Pages are read one at a time from
// the live cache, not from one snapshot: a host changed between pages is
// listed as it is when its page is read.
func (s *Service) HostsPage(pageSize int, token string) ([]state.HostView, string, error) {
	n, err := checkPageSize(pageSize)
	if err != nil {
		return nil, "", err
	}
	key, err := decodeToken(token, hostToken, 1)
	if err != nil {
		return nil, "", err
	}
	hosts, more := s.st.HostsAfter(key[0], n)
	next := ""
	if more && len(hosts) > 0 {
		next = encodeToken(hostToken, hosts[len(hosts)-1].Host.Name)
	}
	return hosts, next, nil
}

// InstancesPage returns up to pageSize instances (0: DefaultPageSize) on
// host ("": every host) of service ("": every service), sorted by host
// then ID, starting after the page token ("": the first page), and the
// token of the next page ("" after the last).
func (s *Service) InstancesPage(host, service string, pageSize int, token string) ([]state.InstanceView, string, error) {
	n, err := checkPageSize(pageSize)
	if err != nil {
		return nil, "", err
	}
	kind := instanceToken + "\x01" + host + "\x01" + service
	key, err := decodeToken(token, kind, 2)
	if err != nil {
		return nil, "", err
	}
	ins, more := s.st.InstancesAfter(host, service, state.InstanceRef{Host: key[0], ID: key[1]}, n)
	next := ""
	if more && len(ins) > 0 {
		last := ins[len(ins)-1].Instance
		next = encodeToken(kind, last.Host, last.ID)
	}
	return ins, next, nil
}
