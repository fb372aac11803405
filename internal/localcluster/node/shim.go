package node

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/etcd-pilot/etcd-pilot/internal/localcluster/userns"
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
// its DST in order (read-only for --ro-bind), changes to DIR (default /, created like a DST)
// and replaces the process with COMMAND, looked up in $PATH when it holds no slash, with the
// current environment. It returns only on failure; the caller should print the error and exit
// with ShimFailedExitCode.
//
// In a user namespace (a local cluster started by a user other than root, see package
// userns) the host's folders owned by others cannot be written: a DST missing there is created
// in a tmpfs copy of its nearest existing folder that only this mount namespace sees (see
// shadow), so nothing is left on the host.
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
	if err := mountPoint(dir, true); err != nil {
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
	if err := mountPoint(b.Target, fi.IsDir()); err != nil {
		return err
	}
	if err := syscall.Mount(b.Source, b.Target, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("failed to bind-mount %s over %s: %w", b.Source, b.Target, err)
	}
	if b.ReadOnly {
		if err := remountReadOnly(b.Target); err != nil {
			return fmt.Errorf("failed to make %s read-only: %w", b.Target, err)
		}
	}
	return nil
}

// mountPoint makes sure path exists as a directory (dir) or a file to mount over, creating
// what is missing on the host file system. In a user namespace, where the machine's folders
// belong to ids the namespace does not map and cannot be written, a missing entry that cannot
// be created is created in a writable copy of its nearest existing folder instead, which only
// this mount namespace sees (see shadow).
func mountPoint(path string, dir bool) error {
	err := createMountPoint(path, dir)
	if err == nil || !shadowing || !(errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EROFS)) {
		return err
	}
	folder := nearestExisting(path)
	if serr := shadow(folder); serr != nil {
		return fmt.Errorf("%w, nor in a copy of %s: %w", err, folder, serr)
	}
	return createMountPoint(path, dir)
}

// shadowing is set in a user namespace: mountPoint may shadow a folder it cannot write.
var shadowing = userns.Inside()

// createMountPoint creates path (and its missing parents) as a directory, or as an empty file
// when dir is false and nothing is there.
func createMountPoint(path string, dir bool) error {
	if dir {
		if err := os.MkdirAll(path, 0o755); err != nil {
			return fmt.Errorf("failed to create mount point %s: %w", path, err)
		}
		return nil
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("failed to create the folder of mount point %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("failed to create mount point %s: %w", path, err)
	}
	return f.Close()
}

// nearestExisting returns path or its nearest ancestor that exists.
func nearestExisting(path string) string {
	for p := filepath.Clean(path); ; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); err == nil || p == "/" {
			return p
		}
	}
}

// shadow replaces folder, in this mount namespace only, with a writable copy: a tmpfs mounted
// over it that holds a bind mount of each of folder's entries (recursive, so mounts under them
// stay) and the same symbolic links, so the view is unchanged but new entries can be created.
// The folder itself on the host is not written. The tmpfs over / is reached with a chroot: a
// mount over the root shows only to a process whose root is that mount.
func shadow(folder string) error {
	old, err := os.Open(folder)
	if err != nil {
		return err
	}
	defer old.Close()
	fi, err := old.Stat()
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a folder", folder)
	}
	entries, err := old.ReadDir(-1)
	if err != nil {
		return fmt.Errorf("failed to list %s: %w", folder, err)
	}
	perm := uint32(fi.Mode().Perm())
	if fi.Mode()&os.ModeSticky != 0 {
		perm |= 0o1000
	}
	opts := fmt.Sprintf("mode=%o", perm)
	// The tmpfs goes over folder, or, for /, first over one of its subfolders (any will do:
	// it is moved over / at once, before anything is copied, so no copy can hold it).
	at := folder
	if folder == "/" {
		at = ""
		for _, e := range entries {
			if e.IsDir() {
				at = "/" + e.Name()
				break
			}
		}
		if at == "" {
			return errors.New("/ holds no folder to mount the copy on first")
		}
	}
	if err := syscall.Mount("tmpfs", at, "tmpfs", 0, opts); err != nil {
		return fmt.Errorf("failed to mount a tmpfs over %s: %w", at, err)
	}
	top, err := os.Open(at)
	if err != nil {
		return err
	}
	defer top.Close()
	if folder == "/" {
		if err := syscall.Mount(at, "/", "", syscall.MS_MOVE, ""); err != nil {
			return fmt.Errorf("failed to move the tmpfs from %s over /: %w", at, err)
		}
	}
	// The host's entries through old (under the tmpfs now), the copy's through top.
	from := func(name string) string { return fmt.Sprintf("/proc/self/fd/%d/%s", old.Fd(), name) }
	to := func(name string) string { return fmt.Sprintf("/proc/self/fd/%d/%s", top.Fd(), name) }
	for _, e := range entries {
		name := e.Name()
		switch {
		case e.Type()&os.ModeSymlink != 0:
			target, err := os.Readlink(from(name))
			if err != nil {
				return err
			}
			if err := os.Symlink(target, to(name)); err != nil {
				return err
			}
			continue
		case e.IsDir():
			if err := os.Mkdir(to(name), 0o755); err != nil {
				return err
			}
		default:
			f, err := os.OpenFile(to(name), os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return err
			}
			f.Close()
		}
		if err := syscall.Mount(from(name), to(name), "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			return fmt.Errorf("failed to bind-mount %s into the copy: %w", filepath.Join(folder, name), err)
		}
	}
	if folder == "/" {
		if err := syscall.Chroot(to("")); err != nil {
			return fmt.Errorf("failed to change the root to the copy of /: %w", err)
		}
		if err := os.Chdir("/"); err != nil {
			return err
		}
	}
	return nil
}

// remountReadOnly makes the bind mount at target read-only. In a user namespace, the flags
// that a bind mount took from the machine's mount (nosuid, nodev, noexec, atime) are locked and
// a remount that drops them is refused: it is retried with them.
func remountReadOnly(target string) error {
	flags := uintptr(syscall.MS_BIND | syscall.MS_REMOUNT | syscall.MS_RDONLY)
	err := syscall.Mount("", target, "", flags, "")
	if !errors.Is(err, syscall.EPERM) {
		return err
	}
	var st syscall.Statfs_t
	if serr := syscall.Statfs(target, &st); serr != nil {
		return err
	}
	return syscall.Mount("", target, "", flags|lockedFlags(st.Flags), "")
}

// statfs(2) flags of a mount (ST_*), as the mount(2) flags they stand for.
var statfsMountFlags = []struct{ st, ms int64 }{
	{0x2, syscall.MS_NOSUID},
	{0x4, syscall.MS_NODEV},
	{0x8, syscall.MS_NOEXEC},
	{0x400, syscall.MS_NOATIME},
	{0x800, syscall.MS_NODIRATIME},
	{0x1000, syscall.MS_RELATIME},
}

// lockedFlags returns the mount(2) flags of the statfs(2) flags f that a user namespace locks.
func lockedFlags(f int64) uintptr {
	var ms uintptr
	for _, m := range statfsMountFlags {
		if f&m.st != 0 {
			ms |= uintptr(m.ms)
		}
	}
	return ms
}
