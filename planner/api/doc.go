// Package api serves the planner's API (package pinfoldv1, generated from
// proto/pinfold/v1/planner.proto) as gRPC and as JSON over HTTP from one
// ConnectRPC handler, with gRPC server reflection. It translates wire
// messages to and from package service and maps service error codes onto
// gRPC codes. CPU amounts arrive as decimal strings and are rounded to
// pieces here, so no float reaches the store.
package api
