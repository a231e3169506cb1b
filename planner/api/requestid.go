package api

import (
	"context"

	"connectrpc.com/connect"

	"github.com/pinfold/pinfold/planner/service"
)

// RequestIDHeader carries a mutating call's request ID: a repeat of the
// ID returns the first outcome and changes nothing (service.WithRequest).
// A repeat answered from the record says so in RepeatedHeader ("true").
const (
	RequestIDHeader = "Pinfold-Request-Id"
	RepeatedHeader  = "Pinfold-Request-Repeated"
)

// requestIDs reads the request ID of unary calls into the context, refusing
// a malformed one, and marks a repeat in the response.
type requestIDs struct{}

func (requestIDs) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		id := req.Header().Get(RequestIDHeader)
		if id == "" {
			return next(ctx, req)
		}
		if err := service.ValidateRequestID(id); err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, err)
		}
		call := &service.RequestCall{ID: id}
		resp, err := next(service.WithRequest(ctx, call), req)
		if err == nil && call.Repeated && resp != nil {
			resp.Header().Set(RepeatedHeader, "true")
		}
		return resp, err
	}
}

func (requestIDs) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (requestIDs) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
