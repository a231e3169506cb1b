package main

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner/wire/pinfoldv1"
	"github.com/pinfold/pinfold/planner/wire/pinfoldv1/pinfoldv1connect"
)

// The planner lists hosts and instances a page at a time (docs/ARCHITECTURE.md, request bounds):
// these walk every page, in order, following next_page_token.

// allHosts is every host, sorted by name.
func allHosts(ctx context.Context, cl pinfoldv1connect.PlannerServiceClient) ([]*pinfoldv1.Host, error) {
	var out []*pinfoldv1.Host
	req := &pinfoldv1.ListHostsRequest{}
	for {
		resp, err := cl.ListHosts(ctx, connect.NewRequest(req))
		if err != nil {
			return nil, err
		}
		out = append(out, resp.Msg.Hosts...)
		if err := nextPage(&req.PageToken, resp.Msg.NextPageToken, "ListHosts"); err != nil || req.PageToken == "" {
			return out, err
		}
	}
}

// eachInstancePage calls f with each page of the instances on host ("":
// every host) of service ("": every service), sorted by host then ID.
func eachInstancePage(ctx context.Context, cl pinfoldv1connect.PlannerServiceClient, host, service string, f func([]*pinfoldv1.Instance)) error {
	req := &pinfoldv1.ListInstancesRequest{Host: host, Service: service}
	for {
		resp, err := cl.ListInstances(ctx, connect.NewRequest(req))
		if err != nil {
			return err
		}
		f(resp.Msg.Instances)
		if err := nextPage(&req.PageToken, resp.Msg.NextPageToken, "ListInstances"); err != nil || req.PageToken == "" {
			return err
		}
	}
}

// allInstances is every instance on host ("": every host) of service ("":
// every service), sorted by host then ID.
func allInstances(ctx context.Context, cl pinfoldv1connect.PlannerServiceClient, host, service string) ([]*pinfoldv1.Instance, error) {
	var out []*pinfoldv1.Instance
	err := eachInstancePage(ctx, cl, host, service, func(page []*pinfoldv1.Instance) { out = append(out, page...) })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// nextPage sets *token to next, refusing a planner that answers the token
// it was asked with (the walk would never end).
func nextPage(token *string, next, method string) error {
	if next != "" && next == *token {
		return fmt.Errorf("%s: the planner answered page_token %q with itself as the next page", method, next)
	}
	*token = next
	return nil
}
