//go:build race

package nodeagent

// raceDetector: the race detector is on (go test -race).
const raceDetector = true
