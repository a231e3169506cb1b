package main

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/api"
	"github.com/pinfold/pinfold/planner/service"
	"github.com/pinfold/pinfold/planner/servicesfile"
)

// A services file (pinfold apply/diff -f) is read by planner/servicesfile;
// here it is checked as the planner checks a deploy, once its share base
// is known.

// checkWithPlanner checks every service of the file as the planner checks
// a deploy of it (api.DeployRequestOf, service.CheckDeploy: health, ports,
// sizes, names, rules), at the planner's share base sb, before any step is
// made: a value the planner refused halfway through the file left the
// steps before it made (issue 37). Every service is checked, and each
// refusal names the file's key and the value. sb 0 (no host to read it
// from): the largest share base, so that no amount a planner may take is
// refused here.
func checkWithPlanner(want []servicesfile.Service, sb int) error {
	p := alloc.DefaultParams()
	p.ShareBase = sb
	if sb <= 0 {
		p.ShareBase = alloc.MaxShareBase
	}
	var errs []error
	for _, w := range want {
		m := proto.CloneOf(w.Deploy)
		if m.Count == 0 {
			// Held at count 0: a scale, or nothing to deploy; the rest of
			// the service is still the planner's to check.
			m.Count = 1
		}
		r, err := api.DeployRequestOf(m, p.ShareBase)
		if err == nil {
			err = service.CheckDeploy(p, r)
		}
		if err != nil {
			msg := err.Error()
			if ce := (*connect.Error)(nil); errors.As(err, &ce) {
				msg = ce.Message()
			}
			errs = append(errs, w.Refused(msg))
		}
	}
	if len(errs) > 0 {
		return &exitError{code: exitBadInput, err: fmt.Errorf("%w (nothing was changed)", errors.Join(errs...))}
	}
	return nil
}
