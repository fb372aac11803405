//go:build race || cgo

package sandboxcmd

// selfSandbox is false when the test binary cannot stand for the operator's binary as a
// sandbox: built with the race detector (its runtime maps its shadow memory at start and
// cannot run under the address-space limit the sandbox sets itself: "too many address space
// collisions for -race mode"), or with cgo (each thread glibc starts reserves its own malloc
// arena, 64 MiB of address space, so one more thread started under load takes the sandbox
// past its limit, with a heap of 20 MiB). The operator is built without either.
const selfSandbox = false
