package localcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/etcd-pilot/etcd-pilot/internal/localcluster/hosts"
	"github.com/etcd-pilot/etcd-pilot/internal/localcluster/userns"
)

// InNamespaceEnv is set (to "1") in the environment of the up process re-executed inside its
// private mount namespace, so it knows not to re-execute again.
const InNamespaceEnv = "ETCD_PILOT_LOCAL_IN_NAMESPACE"

// ParentDeathSignal is the signal NamespacedCommand's process gets when its parent dies. It
// is not SIGTERM because the kernel sends it once per exiting thread of the parent, and a
// second SIGTERM makes the process exit at once (see ctrl.SetupSignalHandler) instead of
// stopping its children.
const ParentDeathSignal = syscall.SIGHUP

// LaneCommand returns a command that runs exe with args in a new network and mount namespace
// (the real-node lane's), as NamespacedCommand does for the mount namespace alone. Root only.
func LaneCommand(exe string, args []string) *exec.Cmd {
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), InNamespaceEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWNET, Setpgid: true, Pdeathsig: ParentDeathSignal}
	return cmd
}

// NamespacedCommand returns a command that runs exe with args in a new private mount
// namespace and a process group of its own, with InNamespaceEnv set and this process's
// standard streams. In its own process group it gets no terminal signals: the caller
// forwards one, so the up process can stop its children in order rather than all of them
// dying to the same Ctrl-C at once. Should the caller die without forwarding (a closed
// terminal, SIGKILL), the command gets ParentDeathSignal and must stop everything all the same.
//
// mode is what userns.Check allowed for probe: as root the mount namespace is created
// directly; otherwise the command also gets a user namespace of its own that maps the user to
// root (see userns.Apply), in which the mount namespace is created.
func NamespacedCommand(exe string, args []string, mode userns.Mode, probe userns.Probe) *exec.Cmd {
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), InNamespaceEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	// os/exec makes the new namespace's mount tree private right after unsharing it, so
	// nothing mounted in it propagates back to the machine.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Setpgid: true, Pdeathsig: ParentDeathSignal}
	if mode == userns.InUserNamespace {
		userns.Apply(cmd.SysProcAttr, probe)
	}
	return cmd
}

// SetUpNameView must run in the up process's private mount namespace: it creates the hosts
// file at hostsPath from the machine's /etc/hosts (its localhost and own names) and
// bind-mounts it over /etc/hosts, so every process started from here on resolves the names
// published to the returned File.
func SetUpNameView(hostsPath string) (*hosts.File, error) {
	if os.Getenv(InNamespaceEnv) != "1" {
		return nil, errors.New("refusing to bind-mount over /etc/hosts outside the local cluster's mount namespace")
	}
	// Already done by os/exec; repeated so this never leaks a mount onto the machine.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return nil, fmt.Errorf("failed to make the mount tree private: %w", err)
	}
	base, err := os.ReadFile("/etc/hosts")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("failed to read /etc/hosts: %w", err)
	}
	f, err := hosts.Create(hostsPath, base)
	if err != nil {
		return nil, err
	}
	if err := syscall.Mount(hostsPath, "/etc/hosts", "", syscall.MS_BIND, ""); err != nil {
		return nil, fmt.Errorf("failed to bind-mount %s over /etc/hosts: %w", hostsPath, err)
	}
	// The children need not know; a `local up` started by one of them must re-execute.
	os.Unsetenv(InNamespaceEnv)
	return f, nil
}

// ExecCommand returns a command running argv inside the mount namespace of the cluster
// described by st (through nsenter; in its user namespace too when it has one of its own), in the current working directory, with KUBECONFIG set
// and kubectl and etcdctl first on PATH. Its exit status is argv's.
func ExecCommand(st *State, argv []string) (*exec.Cmd, error) {
	if len(argv) == 0 {
		return nil, errors.New("no command to run")
	}
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return nil, fmt.Errorf("failed to find nsenter (util-linux), which runs commands in the local cluster's name view: %w", err)
	}
	wd, err := os.Getwd()
	if err != nil {
		return nil, fmt.Errorf("failed to get the working directory: %w", err)
	}
	// Entering a mount namespace moves the working directory to its root; --wd moves back.
	args := []string{fmt.Sprintf("--mount=/proc/%d/ns/mnt", st.Pid), "--wd=" + wd}
	if st.Runtime == RuntimeContainerd {
		// The lane's network: its bridge, the routes to every node's pods, the kube-proxy
		// rules for Services and CoreDNS.
		args = append(args, fmt.Sprintf("--net=/proc/%d/ns/net", st.Pid))
	}
	if !userns.SameAs(st.Pid) {
		// The cluster runs in a user namespace of its own (it was started by a user other
		// than root), which owns its mount namespace: enter that first, as its root. The
		// user it maps to root is that already, and may not call setgroups(2) there.
		enter := []string{fmt.Sprintf("--user=/proc/%d/ns/user", st.Pid)}
		if uid, ok := userns.RootOf(st.Pid); ok && uid == os.Geteuid() {
			enter = append(enter, "--preserve-credentials")
		}
		args = append(enter, args...)
	}
	args = append(append(args, "--"), argv...)
	cmd := exec.Command(nsenter, args...)
	env := []string{"KUBECONFIG=" + st.Kubeconfig}
	path := st.KubeBinDir + string(os.PathListSeparator) + st.EtcdBinDir
	for _, kv := range os.Environ() {
		switch {
		case strings.HasPrefix(kv, "KUBECONFIG="):
		case strings.HasPrefix(kv, "PATH="):
			path += string(os.PathListSeparator) + strings.TrimPrefix(kv, "PATH=")
		default:
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "PATH="+path)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	return cmd, nil
}
