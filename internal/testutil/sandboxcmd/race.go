//go:build race

package sandboxcmd

// race is true in a binary built with the race detector.
const race = true
