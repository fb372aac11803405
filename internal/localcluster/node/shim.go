package node

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// ShimFailedExitCode is the exit status a caller of ShimMain should exit with when ShimMain
// returns (it only returns on failure), as a shell does when it cannot run a command.
const ShimFailedExitCode = 127

// bindMount is one bind mount of the shim: Source on the host over Target in the process's
// view.
type bindMount struct {
	Source   string
	Target   string
	ReadOnly bool
}

// shimSpec is what the shim's arguments say.
type shimSpec struct {
	Binds   []bindMount
	Workdir string
	Argv    []string
}

// shimArgs renders spec as the shim's arguments, the inverse of parseShimArgs.
func shimArgs(spec shimSpec) []string {
	var args []string
	for _, b := range spec.Binds {
		flag := "--bind"
		if b.ReadOnly {
			flag = "--ro-bind"
		}
		args = append(args, flag, b.Source+":"+b.Target)
	}
	if spec.Workdir != "" {
		args = append(args, "--workdir", spec.Workdir)
	}
	args = append(args, "--")
	return append(args, spec.Argv...)
}

// parseShimArgs parses [--bind SRC:DST | --ro-bind SRC:DST | --workdir DIR]... -- COMMAND
// [ARG]... SRC is everything before the first colon, so it must not hold one; DST must be
// absolute.
func parseShimArgs(args []string) (shimSpec, error) {
	var spec shimSpec
	for i := 0; i < len(args); i++ {
		switch a := args[i]; a {
		case "--":
			spec.Argv = args[i+1:]
			if len(spec.Argv) == 0 {
				return shimSpec{}, errors.New("no command after --")
			}
			return spec, nil
		case "--bind", "--ro-bind", "--workdir":
			if i+1 == len(args) {
				return shimSpec{}, fmt.Errorf("%s needs a value", a)
			}
			i++
			v := args[i]
			if a == "--workdir" {
				spec.Workdir = v
				continue
			}
			src, dst, ok := strings.Cut(v, ":")
			if !ok || src == "" || !filepath.IsAbs(dst) {
				return shimSpec{}, fmt.Errorf("%s %q is not SRC:DST with an absolute DST", a, v)
			}
			spec.Binds = append(spec.Binds, bindMount{Source: src, Target: filepath.Clean(dst), ReadOnly: a == "--ro-bind"})
		default:
			return shimSpec{}, fmt.Errorf("unknown shim argument %q (want --bind, --ro-bind, --workdir or --)", a)
		}
	}
	return shimSpec{}, errors.New("no -- before the command")
}

// ShimMain runs a container's command in the mount view the node asked for. args are the
// shim's arguments (without the program name): [--bind SRC:DST | --ro-bind SRC:DST |
// --workdir DIR]... -- COMMAND [ARG]...
//
// The caller must already run in a mount namespace of its own: the node starts the shim with
// exec.Cmd.SysProcAttr.Unshareflags = CLONE_NEWNS. ShimMain makes the mount tree private (so
// nothing propagates back to the host), creates each DST (on the host file system when it is
// missing there: a mount point needs a directory or file to cover), bind-mounts each SRC over
// its DST in order (read-only for --ro-bind), changes to DIR (default /) and replaces the
// process with COMMAND, looked up in $PATH when it holds no slash, with the current
// environment. It returns only on failure; the caller should print the error and exit with
// ShimFailedExitCode.
func ShimMain(args []string) error {
	spec, err := parseShimArgs(args)
	if err != nil {
		return fmt.Errorf("shim: %w", err)
	}
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("shim: failed to make the mount tree private (is the shim in a mount namespace of its own?): %w", err)
	}
	for _, b := range spec.Binds {
		if err := bind(b); err != nil {
			return fmt.Errorf("shim: %w", err)
		}
	}
	dir := spec.Workdir
	if dir == "" {
		dir = "/"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("shim: failed to create working directory %s: %w", dir, err)
	}
	if err := os.Chdir(dir); err != nil {
		return fmt.Errorf("shim: failed to change to working directory %s: %w", dir, err)
	}
	path := spec.Argv[0]
	if !strings.Contains(path, "/") {
		if path, err = exec.LookPath(path); err != nil {
			return fmt.Errorf("shim: failed to find command %q in PATH %q: %w", spec.Argv[0], os.Getenv("PATH"), err)
		}
	}
	err = syscall.Exec(path, spec.Argv, os.Environ())
	return fmt.Errorf("shim: failed to run %s: %w", path, err)
}

// bind mounts b.Source over b.Target, creating the target first.
func bind(b bindMount) error {
	fi, err := os.Stat(b.Source)
	if err != nil {
		return fmt.Errorf("failed to read bind source: %w", err)
	}
	if fi.IsDir() {
		if err := os.MkdirAll(b.Target, 0o755); err != nil {
			return fmt.Errorf("failed to create mount point %s: %w", b.Target, err)
		}
	} else if _, err := os.Stat(b.Target); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(b.Target), 0o755); err != nil {
			return fmt.Errorf("failed to create the folder of mount point %s: %w", b.Target, err)
		}
		f, err := os.OpenFile(b.Target, os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("failed to create mount point %s: %w", b.Target, err)
		}
		f.Close()
	}
	if err := syscall.Mount(b.Source, b.Target, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("failed to bind-mount %s over %s: %w", b.Source, b.Target, err)
	}
	if b.ReadOnly {
		if err := syscall.Mount("", b.Target, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("failed to make %s read-only: %w", b.Target, err)
		}
	}
	return nil
}
