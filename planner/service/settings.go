package service

import (
	"context"

	"github.com/pinfold/pinfold/planner/placement"
	"github.com/pinfold/pinfold/planner/state"
)

// SetPlacementSettings validates and stores the cluster's placement settings.
func (s *Service) SetPlacementSettings(ctx context.Context, ps placement.Settings) (placement.Settings, error) {
	if err := ps.Validate(); err != nil {
		return ps, errf(Invalid, "%w", err)
	}
	var c state.Change
	c.PutPlacement(ps)
	if _, err := s.commit(ctx, &c); err != nil {
		return ps, err
	}
	return ps, nil
}
