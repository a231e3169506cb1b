package planfile

import (
	"encoding/json"
	"math"
	"reflect"
	"strconv"
)

// CPUAmount is a decimal CPU amount in a plan file: a JSON number (1.7),
// as plan export, plan -o json and ps -o json write it, or, for files
// written by older versions that quoted it, a string holding one ("1.7").
// Anything else is refused with the field named, as encoding/json would.
type CPUAmount float64

// UnmarshalJSON reads a number or a quoted decimal number.
func (c *CPUAmount) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || !json.Valid([]byte(s)) {
			return &json.UnmarshalTypeError{Value: "string " + strconv.Quote(s), Type: reflect.TypeFor[float64]()}
		}
		*c = CPUAmount(f)
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	*c = CPUAmount(f)
	return nil
}
