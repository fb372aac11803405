package localcli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/etcd-pilot/etcd-pilot/internal/localcluster"
	"github.com/etcd-pilot/etcd-pilot/internal/localcluster/realnode"
)

// defaultLaneDir is the real-node lane's folder when --dir is not given (gitignored).
const defaultLaneDir = ".local-lane"

type laneArgs struct {
	args           []string
	dir, dirFlag   string
	nodes          int
	operator       bool
	verbose        bool
	root, exe      string
	operatorBinary string
	operatorValues []string
	imageArchives  []string
}

// dirSet reports whether --dir was given.
func dirSet(fs *flag.FlagSet) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "dir" {
			set = true
		}
	})
	return set
}

// localUpLane starts the real-node lane: on the machine it checks what the lane needs, builds
// what is missing (hack/build-node.sh) and re-executes itself in a new network and mount
// namespace, where it runs the lane (localcluster.UpLane).
func localUpLane(ctx context.Context, a laneArgs, stdout, stderr io.Writer) (int, error) {
	if os.Getenv(localcluster.InNamespaceEnv) == "1" {
		return 0, upLaneInNamespace(ctx, a, stdout, stderr)
	}
	if err := localcluster.CheckLaneMachine(); err != nil {
		return 0, fmt.Errorf("this machine cannot run the real-node lane: %w", err)
	}
	if st, err := localcluster.ReadState(a.dir); err == nil {
		return 0, fmt.Errorf("a local cluster is already running in %s (pid %d); stop it with: %s down --dir %s", a.dirFlag, st.Pid, os.Args[0], a.dirFlag)
	}
	if err := os.MkdirAll(a.dir, 0o755); err != nil {
		return 0, err
	}
	if _, err := localcluster.EnsureBinaries(a.root, stderr); err != nil {
		return 0, err
	}
	if err := localcluster.EnsureLaneBinaries(a.root, stderr); err != nil {
		return 0, err
	}
	if _, missing := localcluster.LocateLaneBinaries(a.root); len(missing) > 0 {
		return 0, fmt.Errorf("this machine cannot run the real-node lane: missing %v", missing)
	}
	cmd := localcluster.LaneCommand(a.exe, append([]string{"up"}, a.args...))
	cmd.Args[0] = os.Args[0]
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("failed to start the lane in network and mount namespaces of its own: %w", err)
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
		case <-done:
		}
	}()
	err := cmd.Wait()
	close(done)
	return exitCode(err)
}

func upLaneInNamespace(ctx context.Context, a laneArgs, stdout, stderr io.Writer) error {
	start := time.Now()
	ctx, stop := signal.NotifyContext(ctx, localcluster.ParentDeathSignal)
	defer stop()
	os.Unsetenv(localcluster.InNamespaceEnv)
	bins := localcluster.LocateBinaries(a.root)
	opts := localcluster.LaneOptions{
		Dir:            a.dir,
		Nodes:          a.nodes,
		Operator:       a.operator,
		OperatorValues: a.operatorValues,
		ExtraImages:    a.imageArchives,
		Binaries:       bins,
		Executable:     a.exe,
		OperatorBinary: a.operatorBinary,
	}
	if a.verbose {
		opts.Progress = func(msg string) { fmt.Fprintf(stderr, "%5.1fs %s\n", time.Since(start).Seconds(), msg) }
	}
	st := &localcluster.State{
		Pid:        os.Getpid(),
		Dir:        a.dir,
		Kubeconfig: filepath.Join(a.dir, "kubeconfig"),
		KubeBinDir: bins.Kube,
		EtcdBinDir: bins.Etcd,
		Socket:     filepath.Join(a.dir, "control.sock"),
		Started:    start,
		Runtime:    localcluster.RuntimeContainerd,
	}
	if err := localcluster.WriteState(st); err != nil {
		return err
	}
	defer os.Remove(localcluster.StatePath(a.dir))
	l, err := localcluster.UpLane(ctx, opts)
	if err != nil {
		if ctx.Err() != nil {
			return errors.New("interrupted while starting")
		}
		return err
	}
	ready := fmt.Sprintf("real-node lane ready in %.1fs: run %s exec --dir %s -- kubectl get nodes,pods -A (commands run in the lane's network, with its DNS)",
		time.Since(start).Seconds(), os.Args[0], a.dirFlag)
	return serveUntilDone(ctx, st, l, "real-node lane", ready, filepath.Join(a.dirFlag, "logs"), stdout, stderr)
}

// laneNode runs one node of the lane until SIGTERM.
func laneNode(ctx context.Context) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return realnode.RunNode(ctx)
}

// pause is the pod sandbox's process: it waits for SIGTERM or SIGINT, reaping the children a
// shared process namespace hands it.
func pause() int {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s == syscall.SIGCHLD {
			for {
				var ws syscall.WaitStatus
				if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
					break
				}
			}
			continue
		}
		return 0
	}
	return 0
}
