package model

import "strings"

// An instance's ID is its service's name, '-', and InstanceIDHex
// lowercase hex digits (10: 40 random bits).
const InstanceIDHex = 10

// IsInstanceOf reports whether id has the shape of an instance ID of
// service.
func IsInstanceOf(id, service string) bool {
	rest, ok := strings.CutPrefix(id, service+"-")
	return ok && isHex(rest)
}

// EndsLikeInstanceID reports whether name ends as an instance ID does
// ('-' and InstanceIDHex lowercase hex digits): a service so named could
// not be told from another service's instance by the commands that take
// either.
func EndsLikeInstanceID(name string) bool {
	i := strings.LastIndexByte(name, '-')
	return i > 0 && isHex(name[i+1:])
}

func isHex(s string) bool {
	if len(s) != InstanceIDHex {
		return false
	}
	for _, r := range s {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return true
}
