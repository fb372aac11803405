package charts

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"time"
)

// Budget bounds what a chart from outside the binary (a ConfigMap's or a registry's, written
// by whoever may create an EtcdCluster) may cost the operator. The embedded chart is the
// operator's own and renders in process, unbudgeted.
type Budget struct {
	// Memory is the address space one render may map on top of what the sandbox process
	// maps when it starts (bytes; DefaultRenderMemory when 0). Go's heap reserves address
	// space 64 MiB at a time, so the render's heap may grow by about Memory - 64 MiB.
	Memory int64
	// Time bounds one run of the sandbox, from its start to its last byte of output
	// (DefaultRenderTime when 0). The CPU time it may use is the same, rounded up to a second.
	Time time.Duration
	// Archive bounds the packaged chart (a ConfigMap key, a registry's layer), in bytes
	// (DefaultArchiveBytes when 0). A registry's answer larger than it is refused before it
	// is read.
	Archive int64
	// Unpacked bounds the chart's files unpacked, in bytes (DefaultUnpackedBytes when 0):
	// a small archive of zeros unpacks to gigabytes.
	Unpacked int64
	// Files bounds the number of entries of the archive (DefaultArchiveFiles when 0).
	Files int
	// Output bounds the rendered objects the sandbox hands back, in bytes of JSON
	// (DefaultOutputBytes when 0): the operator decodes them in its own memory.
	Output int64
	// Parallel is how many sandboxes run at once (1 when 0); each may use Memory, in the
	// operator's container.
	Parallel int
	// Command starts the sandbox: the operator's own executable and SandboxArg (the default,
	// /proc/self/exe on Linux). A test binary that renders through a sandbox calls
	// ServeIfSandbox from an init function.
	Command []string
	// Observe, when set, is called after every run of the sandbox with what it cost.
	Observe func(SandboxRun)
}

// Defaults of a Budget.
const (
	// DefaultRenderMemory holds a chart that renders some 8 MiB of manifests (each MiB
	// rendered costs about 5 MiB in Helm's engine and the decoding; measured), hundreds of
	// times the embedded chart's, and keeps a sandbox (the operator's binary is 60 MiB
	// resident when it starts, most of it the executable's pages it shares with the operator,
	// and 110 MiB at most measured) and a busy operator within the operator's default memory
	// limit of 256 MiB.
	// 64 MiB is too little: the heap's first new arena (64 MiB of address space and its
	// metadata) does not fit, and the embedded chart failed one render in sixty.
	DefaultRenderMemory = 128 << 20
	// DefaultRenderTime is some fifty times what a render of the embedded chart takes in a
	// sandbox on a busy node.
	DefaultRenderTime = 10 * time.Second
	// DefaultArchiveBytes is about what a ConfigMap holds (the API server refuses objects
	// above about 1.5 MiB); the embedded chart packs to some 30 KiB.
	DefaultArchiveBytes = 1 << 20
	// DefaultUnpackedBytes and DefaultArchiveFiles bound the unpacked chart.
	DefaultUnpackedBytes = 16 << 20
	DefaultArchiveFiles  = 1000
	// DefaultOutputBytes bounds the rendered objects, as JSON.
	DefaultOutputBytes = 4 << 20
)

// withDefaults returns b with every zero limit set to its default.
func (b Budget) withDefaults() Budget {
	if b.Memory <= 0 {
		b.Memory = DefaultRenderMemory
	}
	if b.Time <= 0 {
		b.Time = DefaultRenderTime
	}
	if b.Archive <= 0 {
		b.Archive = DefaultArchiveBytes
	}
	if b.Unpacked <= 0 {
		b.Unpacked = DefaultUnpackedBytes
	}
	if b.Files <= 0 {
		b.Files = DefaultArchiveFiles
	}
	if b.Output <= 0 {
		b.Output = DefaultOutputBytes
	}
	if b.Parallel <= 0 {
		b.Parallel = 1
	}
	return b
}

// The limits of a Budget, as BudgetError.Limit names them.
const (
	LimitMemory   = "memory"
	LimitTime     = "time"
	LimitArchive  = "archive size"
	LimitUnpacked = "unpacked size"
	LimitFiles    = "number of files"
	LimitOutput   = "output size"
	LimitManifest = "manifest size"
)

// BudgetError is a chart that exceeds a limit of the Budget. Retrying does not help; the
// chart (or the values that drive it) must get cheaper, or the operator's admin must raise
// the limit.
type BudgetError struct {
	// Limit is the limit exceeded (LimitMemory, LimitTime, ...).
	Limit string
	// Value is the limit's value, as the operator's flag takes it ("64 MiB", "10s").
	Value string
	// Detail says what was seen, when known ("the layer is 8 MiB").
	Detail string
	// Flag is the operator flag that sets the limit, "" when none does.
	Flag string
}

func (e *BudgetError) Error() string {
	msg := fmt.Sprintf("the chart exceeds the operator's render budget: %s limit %s", e.Limit, e.Value)
	if e.Detail != "" {
		msg += " (" + e.Detail + ")"
	}
	switch e.Limit {
	case LimitArchive, LimitUnpacked, LimitFiles, LimitManifest:
		msg += "; make the chart smaller"
	default:
		msg += "; make the chart's templates (or the values that drive their loops) cheaper"
	}
	if e.Flag != "" {
		msg += ", or ask the operator's admin to raise " + e.Flag
	}
	return msg
}

// IsBudgetError reports whether err is, or wraps, a BudgetError.
func IsBudgetError(err error) bool {
	var be *BudgetError
	return errors.As(err, &be)
}

// The operator's flags that set the limits, for messages.
const (
	flagMemory  = "--chart-render-memory"
	flagTime    = "--chart-render-timeout"
	flagArchive = "--chart-archive-size"
)

func bytesString(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

func archiveTooLarge(size, limit int64) *BudgetError {
	d := ""
	if size > 0 {
		d = fmt.Sprintf("the archive is %s", bytesString(size))
	}
	return &BudgetError{Limit: LimitArchive, Value: bytesString(limit), Detail: d, Flag: flagArchive}
}

// CheckArchive refuses a packaged chart larger than b allows, packed or unpacked, or with more
// files, reading it as a stream: at most b.Unpacked bytes are unpacked, into no buffer. It
// says nothing of whether data is a chart (the loader does): data that is not a gzipped tar
// passes.
func CheckArchive(data []byte, b Budget) error {
	b = b.withDefaults()
	if int64(len(data)) > b.Archive {
		return archiveTooLarge(int64(len(data)), b.Archive)
	}
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil
	}
	tr := tar.NewReader(gz)
	left := b.Unpacked
	unpacked := &BudgetError{Limit: LimitUnpacked, Value: bytesString(b.Unpacked)}
	for files := 0; ; files++ {
		hd, err := tr.Next()
		if err != nil {
			return nil // the end, or not a tar: the loader says which
		}
		if files >= b.Files {
			return &BudgetError{Limit: LimitFiles, Value: fmt.Sprint(b.Files)}
		}
		if hd.Size > left {
			return unpacked
		}
		// The header may lie: count what comes out.
		n, err := io.Copy(io.Discard, io.LimitReader(tr, left+1))
		if n > left {
			return unpacked
		}
		left -= n
		if err != nil {
			return nil
		}
	}
}
