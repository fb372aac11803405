//go:build !race && !cgo

package sandboxcmd

// selfSandbox is true when the test binary is built as the operator's binary is (no race
// detector, no cgo) and can be its own sandbox.
const selfSandbox = true
