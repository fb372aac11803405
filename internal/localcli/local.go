// Package localcli implements etcd-pilot-local, the local cluster's own binary: a Kubernetes
// cluster on this machine with pods as local processes (internal/localcluster), and the shim
// its process nodes run containers through. The operator binary does not link it.
package localcli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/etcd-pilot/etcd-pilot/internal/localcluster"
	"github.com/etcd-pilot/etcd-pilot/internal/localcluster/node"
	"github.com/etcd-pilot/etcd-pilot/internal/localcluster/userns"
)

// Version is set at build time with -ldflags "-X github.com/etcd-pilot/etcd-pilot/internal/localcli.Version=...".
var Version = "dev"

const usage = `etcd-pilot-local runs a Kubernetes cluster on this machine, with pods as local processes.

Usage: etcd-pilot-local up|exec|down|node|kill-pod|apiserver|operator|image

  etcd-pilot-local up [--dir DIR] [--nodes N] [--operator=true] [--operator-binary FILE] [-v]
                                              start it; stays in the foreground until interrupted
  etcd-pilot-local exec [--dir DIR] -- CMD [ARG]...
                                              run CMD with KUBECONFIG, kubectl and etcdctl, and
                                              the cluster's names (pod and Service DNS names)
  etcd-pilot-local down [--dir DIR]           stop it and wait until every process is gone
  etcd-pilot-local node stop|start NAME [--dir DIR]
                                              fail a node (its pods die, it goes NotReady), or recover it
  etcd-pilot-local kill-pod NAMESPACE/NAME [--dir DIR]
                                              kill a pod's processes, as a crash
  etcd-pilot-local apiserver restart [--dir DIR]
                                              stop kube-apiserver and start it again (a fault)
  etcd-pilot-local operator stop|start [--dir DIR] [--env KEY=VALUE]... [--clear-env]
                                              stop the operator until started again
  etcd-pilot-local net partition|inbound|latency|heal NODE [--delay 100ms] [--dir DIR]
                                              real-node lane only: cut a node off (partition),
                                              drop what it receives (inbound), delay what it
                                              sends (latency, where the kernel has netem), or heal
  etcd-pilot-local image map IMAGE FOLDER [--dir DIR]
                                              run IMAGE's containers from FOLDER from their next
                                              start (a folder without etcd breaks the image)
  etcd-pilot-local image unmap IMAGE [--dir DIR]
                                              back to the default mapping (bin/etcd/vVERSION)
  etcd-pilot-local version                    print the version

Run by a user other than root, the cluster runs in a user namespace of its own that maps the
user to root (the kernel must allow unprivileged user namespaces; up says which setting to
change when it does not); everything it writes belongs to the user.

DIR defaults to .local. The operator (--operator-binary) defaults to etcd-pilot next to this
binary, as make build puts both into bin/; it runs as the operator and as the operator's image.
`

// defaultLocalDir is the local cluster's folder when --dir is not given (gitignored).
const defaultLocalDir = ".local"

// operatorBinaryName is the operator binary's file name, looked up next to this executable
// when --operator-binary is not given.
const operatorBinaryName = "etcd-pilot"

// readProbe reads who runs up and what the kernel allows (tests replace it).
var readProbe = userns.ReadProbe

// localControlTimeout bounds a control request (stopping a node waits for its pods to die).
const localControlTimeout = 2 * time.Minute

// localDownTimeout bounds `down`'s wait for the cluster's processes to exit.
const localDownTimeout = 2 * time.Minute

// Run runs the subcommand named by args[0] and returns the process exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	code, err := run(ctx, args, stdout, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "etcd-pilot-local %s: %v\n", args[0], err)
		return 1
	}
	return code
}

// run runs one subcommand. It returns the exit code to use when err is nil.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
	switch args[0] {
	case "up":
		return localUp(ctx, args[1:], stdout, stderr)
	case "exec":
		return localExec(args[1:], stderr)
	case "down":
		return 0, localDown(args[1:], stdout, stderr)
	case "node":
		return 0, localNode(ctx, args[1:], stderr)
	case "kill-pod":
		return 0, localKillPod(ctx, args[1:], stderr)
	case "apiserver":
		return 0, localAPIServer(ctx, args[1:], stderr)
	case "operator":
		return 0, localOperator(ctx, args[1:], stderr)
	case "image":
		return 0, localImage(args[1:], stderr)
	case "net":
		return 0, localNet(ctx, args[1:], stderr)
	case localcluster.LaneNodeCommand:
		// Hidden: a node of the real-node lane, in the namespaces the lane made for it.
		return 0, laneNode(ctx)
	case "pause":
		// Hidden: the real-node lane's pod sandbox (the pause image runs this binary).
		return pause(), nil
	case "shim":
		// Hidden: the process nodes run each container through it (see node.ShimMain), which
		// returns only on failure.
		err := node.ShimMain(args[1:])
		fmt.Fprintln(stderr, err)
		return node.ShimFailedExitCode, nil
	case "version":
		fmt.Fprintf(stdout, "etcd-pilot-local %s\n", Version)
		return 0, nil
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0, nil
	default:
		fmt.Fprintf(stderr, "unknown command %q\n\n%s", args[0], usage)
		return 2, nil
	}
}

// localFlags parses args, flags and positional arguments in any order (as in
// `node stop NAME --dir DIR`), and returns the positional ones.
func localFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func newLocalFlagSet(name string, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "%s\nFlags of %s:\n", usage, name)
		fs.PrintDefaults()
	}
	dir := fs.String("dir", defaultLocalDir, "the local cluster's folder")
	return fs, dir
}

// localUp starts the local cluster. It runs twice: first on the machine, where it builds the
// missing binaries and re-executes itself in a private mount namespace (inside a user
// namespace of its own when not run by root, see userns); then there (with
// localcluster.InNamespaceEnv set), where it sets up the name view and runs the cluster.
func localUp(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
	fs, dirFlag := newLocalFlagSet("up", stderr)
	nodes := fs.Int("nodes", 3, "number of process nodes")
	operator := fs.Bool("operator", true, "install the operator from config/default: a Deployment whose pods run --operator-binary as its image")
	verbose := fs.Bool("v", false, "print each start-up step")
	operatorBin := fs.String("operator-binary", "", "the operator binary: run as the operator (its manager command) and as the operator's image (default: "+operatorBinaryName+" next to this binary)")
	var operatorArgs stringList
	runtime := fs.String("runtime", "", "empty: process nodes (pods as local processes, any user); containerd: the real-node lane (root only): nodes with containerd, runc, a real kubelet and kube-proxy in namespaces of their own, CoreDNS, images built here (default --dir .local-lane)")
	var operatorValues, imageArchives stringList
	fs.Var(&imageArchives, "image-archive", "with --runtime=containerd: an image archive (OCI layout in a tar file) every node imports (repeatable)")
	fs.Var(&operatorValues, "operator-value", "with --runtime=containerd: a --set value for the operator's chart (repeatable)")
	fs.Var(&operatorArgs, "operator-arg", "an argument added to the operator's (etcd-pilot manager's) in config/default's Deployment, such as --allowed-endpoints=127.0.0.0/8 for a MinIO on this machine (repeatable)")
	if pos, err := localFlags(fs, args); err != nil {
		return 0, err
	} else if len(pos) > 0 {
		return 0, fmt.Errorf("unexpected arguments %q", pos)
	}
	switch *runtime {
	case "":
	case localcluster.RuntimeContainerd:
		if !dirSet(fs) {
			*dirFlag = defaultLaneDir
		}
	default:
		return 0, fmt.Errorf("unknown --runtime %q: leave it out (process nodes) or use %s", *runtime, localcluster.RuntimeContainerd)
	}
	dir, err := filepath.Abs(*dirFlag)
	if err != nil {
		return 0, fmt.Errorf("failed to resolve --dir: %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("failed to find this executable: %w", err)
	}
	wd, _ := os.Getwd()
	root, err := localcluster.FindRoot(wd, filepath.Dir(exe))
	if err != nil {
		return 0, err
	}
	opBin, err := operatorBinary(*operatorBin, exe)
	if err != nil {
		return 0, err
	}

	if *runtime == localcluster.RuntimeContainerd {
		return localUpLane(ctx, laneArgs{
			args: args, dir: dir, dirFlag: *dirFlag, nodes: *nodes, operator: *operator, verbose: *verbose,
			root: root, exe: exe, operatorBinary: opBin, operatorValues: operatorValues, imageArchives: imageArchives,
		}, stdout, stderr)
	}
	if os.Getenv(localcluster.InNamespaceEnv) == "1" {
		opts := localcluster.Options{
			Dir:            dir,
			Nodes:          *nodes,
			Operator:       *operator,
			Binaries:       localcluster.LocateBinaries(root),
			Executable:     exe,
			OperatorBinary: opBin,
			OperatorArgs:   operatorArgs,
		}
		return 0, upInNamespace(ctx, opts, *dirFlag, *verbose, stdout, stderr)
	}

	if st, err := localcluster.ReadState(dir); err == nil {
		return 0, fmt.Errorf("a local cluster is already running in %s (pid %d); stop it with: %s down%s", *dirFlag, st.Pid, os.Args[0], dirArg(*dirFlag))
	}
	// Before building anything: a user other than root needs a user namespace.
	probe := readProbe()
	mode, err := userns.Check(probe)
	if err != nil {
		return 0, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, fmt.Errorf("failed to create %s: %w", dir, err)
	}
	if _, err := localcluster.EnsureBinaries(root, stderr); err != nil {
		return 0, err
	}
	cmd := localcluster.NamespacedCommand(exe, append([]string{"up"}, args...), mode, probe)
	cmd.Args[0] = os.Args[0] // so the ready line names the command as the user typed it
	if err := cmd.Start(); err != nil {
		return 0, startError(mode, probe, err)
	}
	// The cluster runs in a process group of its own, out of reach of the terminal's Ctrl-C;
	// pass the signal on, once.
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
		case <-done:
		}
	}()
	err = cmd.Wait()
	close(done)
	return exitCode(err)
}

// startError explains why the up process could not start in its namespaces (mode, as
// userns.Check allowed for probe).
func startError(mode userns.Mode, probe userns.Probe, err error) error {
	if mode == userns.InUserNamespace {
		return fmt.Errorf("failed to start the local cluster in a user namespace of its own: %w", userns.Explain(probe, err))
	}
	if errors.Is(err, syscall.EPERM) {
		return fmt.Errorf("failed to start the local cluster in a mount namespace of its own: %w (root needs the capability CAP_SYS_ADMIN for it, which a container may not grant)", err)
	}
	return fmt.Errorf("failed to start the local cluster in a mount namespace of its own: %w", err)
}

// operatorBinary returns the absolute path of the operator binary: flagValue, or
// operatorBinaryName next to exe when flagValue is empty. It fails when that file is not an
// executable file, saying how to build it.
func operatorBinary(flagValue, exe string) (string, error) {
	path := flagValue
	if path == "" {
		path = filepath.Join(filepath.Dir(exe), operatorBinaryName)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("failed to resolve --operator-binary: %w", err)
	}
	if err := localcluster.CheckOperatorBinary(abs); err != nil {
		if flagValue == "" {
			return "", fmt.Errorf("%w: run make build, which builds bin/%s next to bin/etcd-pilot-local, or name the operator binary with --operator-binary", err, operatorBinaryName)
		}
		return "", fmt.Errorf("%w: run make build and pass bin/%s, or leave --operator-binary out", err, operatorBinaryName)
	}
	return abs, nil
}

// upInNamespace runs the local cluster in the mount namespace localUp created, until ctx
// ends or a part of the cluster fails, then stops everything.
func upInNamespace(ctx context.Context, opts localcluster.Options, dirFlag string, verbose bool, stdout, stderr io.Writer) (err error) {
	start := time.Now()
	// The death of the process that started this one means stop, too.
	ctx, stop := signal.NotifyContext(ctx, localcluster.ParentDeathSignal)
	defer stop()
	if verbose {
		opts.Progress = func(msg string) { fmt.Fprintf(stderr, "%5.1fs %s\n", time.Since(start).Seconds(), msg) }
	}
	names, err := localcluster.SetUpNameView(filepath.Join(opts.Dir, "hosts"))
	if err != nil {
		return err
	}
	opts.Names = names
	st := &localcluster.State{
		Pid:        os.Getpid(),
		Dir:        opts.Dir,
		Kubeconfig: filepath.Join(opts.Dir, "kubeconfig"),
		KubeBinDir: opts.Binaries.Kube,
		EtcdBinDir: opts.Binaries.Etcd,
		Socket:     filepath.Join(opts.Dir, "control.sock"),
		Started:    start,
	}
	// Written first, so `down` can stop a cluster that is still starting.
	if err := localcluster.WriteState(st); err != nil {
		return err
	}
	defer os.Remove(localcluster.StatePath(opts.Dir))

	c, err := localcluster.Up(ctx, opts)
	if err != nil {
		if ctx.Err() != nil {
			return errors.New("interrupted while starting")
		}
		return err
	}
	kubeconfig := filepath.Join(dirFlag, "kubeconfig")
	ready := fmt.Sprintf("local cluster ready in %.1fs: export KUBECONFIG=%s, or run: %s exec%s -- kubectl get etcdc,pods",
		time.Since(start).Seconds(), kubeconfig, os.Args[0], dirArg(dirFlag))
	return serveUntilDone(ctx, st, c, "local cluster", ready, filepath.Join(dirFlag, "logs"), stdout, stderr)
}

// running is a started cluster, the process nodes' or the real-node lane.
type running interface {
	localcluster.Controller
	Stop()
	Failed() <-chan error
}

// serveUntilDone serves c's control socket (st.Socket), prints ready, and waits until ctx
// ends or a part of c fails; then it stops c and says how long that took.
func serveUntilDone(ctx context.Context, st *localcluster.State, c running, name, ready, logs string, stdout, stderr io.Writer) error {
	stopping := time.Now()
	defer func() {
		c.Stop()
		fmt.Fprintf(stderr, "%s stopped in %.1fs\n", name, time.Since(stopping).Seconds())
	}()
	l, err := localcluster.ListenControl(st.Socket)
	if err != nil {
		return err
	}
	defer os.Remove(st.Socket)
	serveCtx, stopServing := context.WithCancel(ctx)
	defer stopServing()
	go func() {
		if err := localcluster.ServeControl(serveCtx, l, c); err != nil {
			fmt.Fprintln(stderr, err)
		}
	}()
	fmt.Fprintln(stdout, ready)
	select {
	case <-ctx.Done():
		stopping = time.Now()
		return nil
	case err := <-c.Failed():
		stopping = time.Now()
		return fmt.Errorf("stopping the %s: %w (logs in %s)", name, err, logs)
	}
}

// dirArg returns " --dir DIR" unless dir is the default.
func dirArg(dir string) string {
	if dir == defaultLocalDir {
		return ""
	}
	return " --dir " + dir
}

// localExec runs a command in the cluster's name view and returns its exit code.
func localExec(args []string, stderr io.Writer) (int, error) {
	fs, dirFlag := newLocalFlagSet("exec", stderr)
	if err := fs.Parse(args); err != nil {
		return 0, err
	}
	if fs.NArg() == 0 {
		return 0, errors.New("name the command to run: exec [--dir DIR] -- CMD [ARG]...")
	}
	st, err := readState(*dirFlag)
	if err != nil {
		return 0, err
	}
	cmd, err := localcluster.ExecCommand(st, fs.Args())
	if err != nil {
		return 0, err
	}
	// The command shares the terminal: a Ctrl-C reaches it directly, and this process only
	// waits for it (the signal handler of main keeps the first signal from killing it).
	return exitCode(cmd.Run())
}

// exitCode turns a child's exit into this process's exit code, as a shell does.
func exitCode(err error) (int, error) {
	if err == nil {
		return 0, nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	return 0, err
}

func readState(dirFlag string) (*localcluster.State, error) {
	dir, err := filepath.Abs(dirFlag)
	if err != nil {
		return nil, fmt.Errorf("failed to resolve --dir: %w", err)
	}
	st, err := localcluster.ReadState(dir)
	if errors.Is(err, localcluster.ErrNotRunning) {
		return nil, fmt.Errorf("%w; start one with: %s up%s", err, os.Args[0], dirArg(dirFlag))
	}
	return st, err
}

// localDown stops the cluster and waits until its up process and every process it had
// started are gone; processes that outlive the up process are killed and reported.
func localDown(args []string, stdout, stderr io.Writer) error {
	fs, dirFlag := newLocalFlagSet("down", stderr)
	if pos, err := localFlags(fs, args); err != nil {
		return err
	} else if len(pos) > 0 {
		return fmt.Errorf("unexpected arguments %q", pos)
	}
	dir, err := filepath.Abs(*dirFlag)
	if err != nil {
		return fmt.Errorf("failed to resolve --dir: %w", err)
	}
	st, err := localcluster.ReadState(dir)
	if errors.Is(err, localcluster.ErrNotRunning) {
		fmt.Fprintf(stdout, "no local cluster is running in %s\n", *dirFlag)
		return nil
	}
	if err != nil {
		return err
	}
	start := time.Now()
	procs := localcluster.Descendants(st.Pid)
	if err := syscall.Kill(st.Pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("failed to signal the local cluster (pid %d): %w", st.Pid, err)
	}
	deadline := time.Now().Add(localDownTimeout)
	for localcluster.Alive(st.Pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the local cluster (pid %d) did not stop within %s; see %s", st.Pid, localDownTimeout, filepath.Join(*dirFlag, "logs", "local.log"))
		}
		// Children started while stopping (an operator restart) count too.
		procs = localcluster.MergeProcs(procs, localcluster.Descendants(st.Pid))
		time.Sleep(100 * time.Millisecond)
	}
	if left := localcluster.KillLeftovers(procs, 5*time.Second); len(left) > 0 {
		return fmt.Errorf("the local cluster stopped but left processes behind, now killed: %s", strings.Join(left, "; "))
	}
	fmt.Fprintf(stdout, "local cluster stopped in %.1fs\n", time.Since(start).Seconds())
	return nil
}

func localNode(ctx context.Context, args []string, stderr io.Writer) error {
	fs, dirFlag := newLocalFlagSet("node", stderr)
	pos, err := localFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 || (pos[0] != "stop" && pos[0] != "start") {
		return errors.New("usage: node stop|start NAME [--dir DIR]")
	}
	action := localcluster.ActionNodeStop
	if pos[0] == "start" {
		action = localcluster.ActionNodeStart
	}
	return control(ctx, *dirFlag, action, url.Values{"name": {pos[1]}})
}

func localKillPod(ctx context.Context, args []string, stderr io.Writer) error {
	fs, dirFlag := newLocalFlagSet("kill-pod", stderr)
	pos, err := localFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("usage: kill-pod NAMESPACE/NAME [--dir DIR]")
	}
	ns, name, ok := strings.Cut(pos[0], "/")
	if !ok {
		ns, name = "default", pos[0]
	}
	return control(ctx, *dirFlag, localcluster.ActionKillPod, url.Values{"namespace": {ns}, "name": {name}})
}

func localAPIServer(ctx context.Context, args []string, stderr io.Writer) error {
	fs, dirFlag := newLocalFlagSet("apiserver", stderr)
	pos, err := localFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] != "restart" {
		return errors.New("usage: apiserver restart [--dir DIR]")
	}
	return control(ctx, *dirFlag, localcluster.ActionAPIServerRestart, nil)
}

func localNet(ctx context.Context, args []string, stderr io.Writer) error {
	fs, dirFlag := newLocalFlagSet("net", stderr)
	delay := fs.Duration("delay", 0, "with latency: the delay added to what the node sends")
	pos, err := localFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return errors.New("usage: net partition|inbound|latency|heal NODE [--delay 100ms] [--dir DIR]")
	}
	params := url.Values{"fault": {pos[0]}, "node": {pos[1]}}
	if *delay > 0 {
		params.Set("delay", delay.String())
	}
	return control(ctx, *dirFlag, localcluster.ActionNetFault, params)
}

func localImage(args []string, stderr io.Writer) error {
	fs, dirFlag := newLocalFlagSet("image", stderr)
	pos, err := localFlags(fs, args)
	if err != nil {
		return err
	}
	usage := errors.New("usage: image map IMAGE FOLDER | image unmap IMAGE [--dir DIR]")
	path := filepath.Join(*dirFlag, localcluster.ImageOverridesFile)
	switch {
	case len(pos) == 3 && pos[0] == "map":
		return localcluster.SetImageOverride(path, pos[1], pos[2])
	case len(pos) == 2 && pos[0] == "unmap":
		return localcluster.SetImageOverride(path, pos[1], "")
	}
	return usage
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func localOperator(ctx context.Context, args []string, stderr io.Writer) error {
	fs, dirFlag := newLocalFlagSet("operator", stderr)
	var env stringList
	fs.Var(&env, "env", "with start: KEY=VALUE added to the operator's environment from now on (repeatable)")
	clearEnv := fs.Bool("clear-env", false, "with start: drop the variables earlier --env added")
	pos, err := localFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || (pos[0] != "stop" && pos[0] != "start") {
		return errors.New("usage: operator stop|start [--dir DIR]")
	}
	action := localcluster.ActionOperatorStop
	params := url.Values{}
	if pos[0] == "start" {
		action = localcluster.ActionOperatorStart
		params["env"] = env
		if *clearEnv {
			params.Set("clear-env", "true")
		}
	}
	return control(ctx, *dirFlag, action, params)
}

func control(ctx context.Context, dirFlag, action string, params url.Values) error {
	st, err := readState(dirFlag)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, localControlTimeout)
	defer cancel()
	return localcluster.Control(ctx, st, action, params)
}
