// Package servicesfile is the services file of `pinfold apply -f` and
// `pinfold diff -f` (a pinfold services file, or a docker compose file):
// strict decoding and validation that name the offending key
// (services.web.cpu), each service as the deploy it asks for, the
// planner's refusal of one named by the file's key, and the comparison of
// the file's services with the planner's (Compare: the steps apply makes).
// It is pure: it takes bytes and the planner's answers and returns values
// and errors; no I/O, clock or logging (cmd/pinfold reads the file, calls
// the planner, prints and picks the exit code).
//
// It imports the leaves (planner/model, planner/wire/pinfoldv1), the
// engine's and the placement rules' own checks (planner/alloc,
// planner/placement) and the YAML readers; never planner/service,
// planner/state or planner/api.
package servicesfile
