package main

import "math"

// int32Of is v as the API's int32, or a bad-input error naming the flag
// and the value when v is outside lo..hi (hi at most math.MaxInt32): a
// plain conversion would wrap (scale --count 4294967298 once asked for 2
// instances, issue 26 N4). Every int flag sent as an int32 goes through
// it.
func int32Of(flag string, v, lo, hi int) (int32, error) {
	hi = min(hi, math.MaxInt32)
	if v < lo || v > hi {
		return 0, badInput("%s %d: want %d..%d", flag, v, lo, hi)
	}
	return int32(v), nil
}
