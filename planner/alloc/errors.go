package alloc

import (
	"errors"
	"fmt"
)

// Code classifies an error for API and CLI mapping.
type Code string

const (
	// CodeInvalid: the input is malformed or out of range (CLI exit 2).
	CodeInvalid Code = "invalid_argument"
	// CodeInsufficient: valid, but the hosts cannot take it (CLI exit 1).
	CodeInsufficient Code = "insufficient_capacity"
	// CodeNoHost: no host qualifies for the strategy (each).
	CodeNoHost Code = "no_host_qualifies"
	// CodeFillImpossible: fill cannot top every host up (all or nothing).
	CodeFillImpossible Code = "fill_impossible"
	// CodeResizeNoFit: the resized instance does not fit on its host.
	CodeResizeNoFit Code = "resize_does_not_fit"
)

// ErrInsufficient is matched by every capacity error (errors.Is).
var ErrInsufficient = errors.New("alloc: insufficient capacity")

// Error explains why a request cannot be met or is invalid.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	// Field and Value name the offending input for CodeInvalid.
	Field string `json:"field,omitempty"`
	Value string `json:"value,omitempty"`
	// Hosts are the hosts the message speaks about, sorted.
	Hosts []string `json:"hosts,omitempty"`
	// reason is Message less "field = value: ", for a caller that names
	// the value as its user wrote it (Reason).
	reason string
}

// Reason is why the input is invalid, without the field and value that
// Message starts with ("" for errors that are not CodeInvalid).
func (e *Error) Reason() string { return e.reason }

// Error is Message: it names the field and value for the user (no
// package prefix: a new user's trial read "alloc: strategy = …").
func (e *Error) Error() string { return e.Message }

// Unwrap lets errors.Is(err, ErrInsufficient) match capacity errors.
func (e *Error) Unwrap() error {
	if e.Code == CodeInvalid {
		return nil
	}
	return ErrInsufficient
}

// raw is a value shown as is, not quoted ("[]", "null").
type raw string

func invalid(field string, value any, reason string, args ...any) *Error {
	v := fmt.Sprint(value)
	if s, ok := value.(string); ok {
		v = fmt.Sprintf("%q", s)
	}
	r := fmt.Sprintf(reason, args...)
	return &Error{Code: CodeInvalid, Field: field, Value: v, Message: fmt.Sprintf("%s = %s: %s", field, v, r), reason: r}
}
