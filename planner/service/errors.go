package service

import (
	"errors"
	"fmt"

	"github.com/pinfold/pinfold/planner/alloc"
	"github.com/pinfold/pinfold/planner/placement"
)

// Code classifies errors for the API (they map onto gRPC/Connect codes).
type Code string

const (
	Invalid    Code = "invalid_argument"
	NotFound   Code = "not_found"
	Exists     Code = "already_exists"
	Precond    Code = "failed_precondition"
	Exhausted  Code = "resource_exhausted"
	Conflicted Code = "aborted"
)

// Error is a service error with a code and a message naming the field or
// object and the value.
type Error struct {
	Code    Code
	Message string
	// Alloc carries the engine's error (codes, hosts) when there is one.
	Alloc *alloc.Error
	// Eliminations is the placement rules' report when a deploy could not
	// be placed: rule by rule, the hosts each removed.
	Eliminations []placement.Elimination
	// Cause is the error this one reports, if any (errors.Is/As reach it).
	Cause error
}

func (e *Error) Error() string { return e.Message }

// Unwrap is the cause.
func (e *Error) Unwrap() error { return e.Cause }

// errf is an error of code whose message is format with args; a %w verb
// in format makes that argument its cause.
func errf(code Code, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	return &Error{Code: code, Message: err.Error(), Cause: errors.Unwrap(err)}
}

// fromAlloc wraps an allocation engine error.
func fromAlloc(err error) error {
	var ae *alloc.Error
	if !errors.As(err, &ae) {
		return err
	}
	code := Exhausted
	if ae.Code == alloc.CodeInvalid {
		code = Invalid
	}
	return &Error{Code: code, Message: ae.Message, Alloc: ae, Cause: ae}
}

// CodeOf returns err's code ("" for internal errors).
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
