//go:build !race

package sandboxcmd

const race = false
