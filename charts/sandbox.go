package charts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/etcd-pilot/etcd-pilot/internal/egress"
	"helm.sh/helm/v3/pkg/chartutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	sigsyaml "sigs.k8s.io/yaml"
)

// SandboxArg is the subcommand of the operator's binary that runs a render sandbox
// (RunSandbox). It is not for people: the operator starts it.
const SandboxArg = "render-sandbox"

// Why a child process, and not a budget inside the operator's process: Helm's engine
// (text/template with Sprig) has no hook to count what a template allocates or to stop it
// between two steps; `repeat`, `until` and `range` run to their end once called, and Go
// cannot take memory back from a goroutine or stop one. A child process is the unit the
// kernel can bound (setrlimit) and the operator can kill. It costs a process start per
// render that misses the cache (BenchmarkRenderCustomChart): renders are cached by the values'
// hash, so a settled cluster starts none.

// Sandbox renders charts in child processes, each bounded by the Budget. It is safe for
// concurrent use; at most Budget.Parallel children run at once.
type Sandbox struct {
	budget Budget
	slots  chan struct{}
}

// NewSandbox returns a Sandbox with b's limits (defaults for zero ones).
func NewSandbox(b Budget) *Sandbox {
	b = b.withDefaults()
	if len(b.Command) == 0 {
		b.Command = defaultSandboxCommand()
	}
	return &Sandbox{budget: b, slots: make(chan struct{}, b.Parallel)}
}

// Budget returns the Sandbox's limits.
func (s *Sandbox) Budget() Budget { return s.budget }

// SandboxRun is what one run of the sandbox cost.
type SandboxRun struct {
	// Op is "load" or "render".
	Op string
	// Wall is the time from the start of the child to its exit.
	Wall time.Duration
	// MaxRSS is the child's peak resident memory in bytes, 0 when the system does not say.
	MaxRSS int64
	// Exceeded is the limit the run exceeded, "" when none.
	Exceeded string
}

// FromArchive returns a Renderer for a packaged chart that renders in the sandbox. The
// archive is checked against the Budget's sizes here, and loaded by Helm only in a sandbox:
// an archive that is not a chart is an error now, as from the package's FromArchive.
func (s *Sandbox) FromArchive(data []byte) (*Renderer, error) {
	if err := CheckArchive(data, s.budget); err != nil {
		return nil, err
	}
	res, err := s.run(sandboxRequest{Op: "load", Archive: data})
	if err != nil {
		return nil, err
	}
	r := newRenderer(nil)
	r.sandbox = &sandboxed{sandbox: s, archive: data, name: res.Name, version: res.Version}
	return r, nil
}

// sandboxed is what a Renderer of a chart from outside the binary keeps: the archive, which
// only a sandbox unpacks.
type sandboxed struct {
	sandbox       *Sandbox
	archive       []byte
	name, version string
	caps          *Capabilities
	// egress are the outbound policy's flags (egress.Policy.Args) the sandbox fetches the
	// URLs of the chart's values schemas under.
	egress []string
}

// sandboxRequest is what the operator writes to a sandbox's standard input.
type sandboxRequest struct {
	// Op is "load" (check the archive is a chart, say its name and version) or "render".
	Op      string
	Archive []byte
	Release Release
	// Values are the values as YAML, the way copyValues reads them.
	Values       []byte
	Capabilities *Capabilities
	// Egress are the flags of the outbound policy schema URLs are fetched under
	// (egress.Policy.Args; the default policy when empty).
	Egress []string
}

// sandboxResponse is what a sandbox writes to its standard output.
type sandboxResponse struct {
	Name, Version string
	// Objects are the rendered objects, as JSON.
	Objects []json.RawMessage
	// Error is the load's or the render's error; the others are empty then.
	Error string
}

// render renders through the sandbox and returns each object's JSON.
func (sb *sandboxed) render(rel Release, values map[string]any) ([][]byte, error) {
	vals, err := sigsyaml.Marshal(values)
	if err != nil {
		return nil, fmt.Errorf("failed to encode values: %w", err)
	}
	res, err := sb.sandbox.run(sandboxRequest{Op: "render", Archive: sb.archive, Release: rel, Values: vals, Capabilities: sb.caps, Egress: sb.egress})
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(res.Objects))
	for i, o := range res.Objects {
		out[i] = o
	}
	return out, nil
}

// run starts a sandbox, hands it req and reads its answer, within the Budget.
func (s *Sandbox) run(req sandboxRequest) (*sandboxResponse, error) {
	in, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("failed to encode the sandbox request: %w", err)
	}
	// A slot first: the time limit counts the child's life, not the wait for it.
	s.slots <- struct{}{}
	defer func() { <-s.slots }()

	b := s.budget
	ctx, cancel := context.WithTimeout(context.Background(), b.Time)
	defer cancel()
	cpu := cpuSeconds(b.Time)
	args := append(append([]string{}, b.Command[1:]...), fmt.Sprintf("--memory=%d", b.Memory), fmt.Sprintf("--cpu-seconds=%d", cpu))
	cmd := exec.CommandContext(ctx, b.Command[0], args...)
	// Nothing of the operator's environment (its kubeconfig, its GOMEMLIMIT): one thread of Go
	// code, so that CPU time is wall time and the render does not take the operator's cores.
	cmd.Env = []string{"GOMAXPROCS=1", "GOTRACEBACK=single"}
	cmd.Stdin = bytes.NewReader(in)
	stdout := &cappedBuffer{max: b.Output}
	stderr := &cappedBuffer{max: 4 << 10, quiet: true}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = time.Second
	setSandboxAttrs(cmd)
	start := time.Now()
	err = cmd.Run()
	run := SandboxRun{Op: req.Op, Wall: time.Since(start), MaxRSS: maxRSS(cmd.ProcessState)}
	res, err := s.classify(ctx, cmd.ProcessState, err, stdout, stderr)
	var be *BudgetError
	if errors.As(err, &be) {
		run.Exceeded = be.Limit
	}
	if b.Observe != nil {
		b.Observe(run)
	}
	return res, err
}

// classify turns how the sandbox ended into its answer, a BudgetError, or an error of the
// sandbox itself.
func (s *Sandbox) classify(ctx context.Context, ps *os.ProcessState, runErr error, stdout, stderr *cappedBuffer) (*sandboxResponse, error) {
	b := s.budget
	if runErr == nil && !stdout.over {
		res := &sandboxResponse{}
		if err := json.Unmarshal(stdout.Bytes(), res); err != nil {
			return nil, &SandboxError{fmt.Errorf("failed to read its answer: %w", err)}
		}
		if res.Error != "" {
			return nil, errors.New(res.Error)
		}
		return res, nil
	}
	switch {
	case stdout.over:
		return nil, &BudgetError{Limit: LimitOutput, Value: bytesString(b.Output), Detail: "the rendered objects are larger"}
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return nil, &BudgetError{Limit: LimitTime, Value: b.Time.String(), Detail: "the render did not finish in time", Flag: flagTime}
	case outOfMemory(stderr.String()):
		return nil, &BudgetError{Limit: LimitMemory, Value: bytesString(b.Memory), Detail: "the render ran out of it", Flag: flagMemory}
	case cpuLimitHit(ps, cpuSeconds(b.Time)):
		return nil, &BudgetError{Limit: LimitTime, Value: b.Time.String(), Detail: "the render used up its CPU time", Flag: flagTime}
	}
	return nil, &SandboxError{fmt.Errorf("%w: %s", runErr, firstLine(stderr.String()))}
}

// SandboxError is a sandbox that could not run or ended without an answer for a reason that
// is not the chart's (the system could not start a process, or killed it for the memory of
// the operator's container): it may work on the next try.
type SandboxError struct{ err error }

func (e *SandboxError) Error() string {
	return fmt.Sprintf("failed to run the chart render sandbox: %v", e.err)
}

func (e *SandboxError) Unwrap() error { return e.err }

// outOfMemory reports whether a Go program's standard error says it could not map memory,
// as it does when RLIMIT_DATA stops it ("fatal error: runtime: out of memory").
func outOfMemory(stderr string) bool {
	return strings.Contains(stderr, "out of memory") || strings.Contains(stderr, "cannot allocate memory")
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// cappedBuffer keeps at most max bytes; over records that more came. A quiet one swallows
// the rest, a loud one fails the write, which ends the child's output. (No bytes.Buffer
// embedded: its ReadFrom would let io.Copy past Write.)
type cappedBuffer struct {
	buf   bytes.Buffer
	max   int64
	over  bool
	quiet bool
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	room := c.max - int64(c.buf.Len())
	if int64(len(p)) > room {
		c.over = true
		if room > 0 {
			c.buf.Write(p[:room])
		}
		if c.quiet {
			return len(p), nil
		}
		return 0, errors.New("the output exceeds its limit")
	}
	return c.buf.Write(p)
}

func (c *cappedBuffer) Bytes() []byte  { return c.buf.Bytes() }
func (c *cappedBuffer) String() string { return c.buf.String() }

// ServeIfSandbox makes the process a render sandbox, and exits, when it was started as one
// (its first argument is SandboxArg). A test binary whose Budget.Command is itself calls it
// from an init function; the operator's binary has the subcommand.
func ServeIfSandbox() {
	if len(os.Args) > 1 && os.Args[1] == SandboxArg {
		os.Exit(RunSandbox(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
}

// RunSandbox is the render sandbox: it limits its own memory and CPU time (--memory bytes on
// top of what it maps now, --cpu-seconds), and only then reads a request on stdin, loads the
// chart, renders it and writes the answer on stdout. It returns the process's exit code.
func RunSandbox(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(SandboxArg, flag.ContinueOnError)
	fs.SetOutput(stderr)
	memory := fs.Int64("memory", DefaultRenderMemory, "bytes the render may map")
	cpu := fs.Int64("cpu-seconds", int64(DefaultRenderTime/time.Second), "CPU seconds the sandbox may use")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := limitSelf(*memory, *cpu); err != nil {
		fmt.Fprintf(stderr, "%s: failed to limit the sandbox: %v\n", SandboxArg, err)
		return 1
	}
	res := serve(stdin)
	if err := json.NewEncoder(stdout).Encode(res); err != nil {
		fmt.Fprintf(stderr, "%s: failed to write the answer: %v\n", SandboxArg, err)
		return 1
	}
	return 0
}

// serve answers one request: only here does Helm see a chart from outside the binary.
func serve(stdin io.Reader) sandboxResponse {
	req := sandboxRequest{}
	if err := json.NewDecoder(stdin).Decode(&req); err != nil {
		return sandboxResponse{Error: fmt.Sprintf("failed to read the sandbox request: %v", err)}
	}
	r, err := FromArchive(req.Archive)
	if err != nil {
		return sandboxResponse{Error: err.Error()}
	}
	name, version := r.Chart()
	if req.Op == "load" {
		return sandboxResponse{Name: name, Version: version}
	}
	if req.Capabilities != nil {
		if r, err = r.WithCapabilities(*req.Capabilities); err != nil {
			return sandboxResponse{Error: err.Error()}
		}
	}
	var ef egress.Flags
	efs := flag.NewFlagSet("egress", flag.ContinueOnError)
	efs.SetOutput(io.Discard)
	ef.Bind(efs)
	if err := efs.Parse(req.Egress); err != nil {
		return sandboxResponse{Error: fmt.Sprintf("failed to read the outbound policy: %v", err)}
	}
	policy, err := ef.Policy()
	if err != nil {
		return sandboxResponse{Error: fmt.Sprintf("failed to read the outbound policy: %v", err)}
	}
	r.WithEgress(policy)
	vals, err := chartutil.ReadValues(req.Values)
	if err != nil {
		return sandboxResponse{Error: fmt.Sprintf("failed to decode values: %v", err)}
	}
	objs, err := r.render(req.Release, vals.AsMap())
	if err != nil {
		return sandboxResponse{Error: err.Error()}
	}
	res := sandboxResponse{Name: name, Version: version, Objects: make([]json.RawMessage, 0, len(objs))}
	for _, o := range objs {
		js, err := o.MarshalJSON()
		if err != nil {
			return sandboxResponse{Error: fmt.Sprintf("failed to encode rendered %s %s: %v", o.GetKind(), o.GetName(), err)}
		}
		res.Objects = append(res.Objects, js)
	}
	return res
}

// decodeObjects decodes objects' JSON.
func decodeObjects(raw [][]byte) ([]*unstructured.Unstructured, error) {
	out := make([]*unstructured.Unstructured, 0, len(raw))
	for _, js := range raw {
		obj, _, err := unstructured.UnstructuredJSONScheme.Decode(js, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("failed to decode a rendered object: %w", err)
		}
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return nil, fmt.Errorf("a rendered object is a list")
		}
		out = append(out, u)
	}
	return out, nil
}

// cpuSeconds is the CPU time a sandbox may use: its time limit, rounded up to a second.
func cpuSeconds(d time.Duration) int64 { return int64(math.Ceil(d.Seconds())) }
