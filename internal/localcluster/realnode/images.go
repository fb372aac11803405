package realnode

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Image names of the lane. They name no registry: the lane imports every image into each
// node's containerd, and pods never pull (imagePullPolicy IfNotPresent finds them, Never too).
const (
	PauseImage    = "etcd-pilot.local/pause:lane"
	OperatorImage = "etcd-pilot.local/etcd-pilot:lane"
	// OperatorRepository and OperatorTag are OperatorImage's parts, for the chart's values.
	OperatorRepository = "etcd-pilot.local/etcd-pilot"
	OperatorTag        = "lane"
)

// nonrootUID is the user of the distroless "nonroot" images, which the Dockerfile's USER names.
const nonrootUID = 65532

const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// distrolessStatic is the equivalent of the distroless static base (the nonroot variant
// differs only in the default user): the users root, nobody and nonroot, their home folders,
// a world-writable /tmp, the name service order, and the CA bundle of this machine. The
// distroless image itself cannot be pulled here.
func distrolessStatic() []File {
	files := []File{
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte(
			"root:x:0:0:root:/root:/sbin/nologin\n" +
				"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
				"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnobody:x:65534:\ntty:x:5:\nstaff:x:50:\nnonroot:x:65532:\n")},
		{Path: "/etc/nsswitch.conf", Mode: 0o644, Data: []byte("hosts: files dns\n")},
		{Path: "/etc/os-release", Mode: 0o644, Data: []byte("PRETTY_NAME=\"Distroless equivalent (etcd-pilot-local)\"\nID=distroless\n")},
		{Path: "/tmp", Dir: true, Mode: 0o777 | os.ModeSticky},
		{Path: "/root", Dir: true, Mode: 0o700},
		{Path: "/home/nonroot", Dir: true, Mode: 0o700, UID: nonrootUID, GID: nonrootUID},
	}
	if _, err := os.Stat("/etc/ssl/certs/ca-certificates.crt"); err == nil {
		files = append(files, File{Path: "/etc/ssl/certs/ca-certificates.crt", Mode: 0o644, Source: "/etc/ssl/certs/ca-certificates.crt"})
	}
	return files
}

// PauseImageOf is the pod sandbox image: exe (a static binary with a pause command, see
// localcli) as /pause.
func PauseImageOf(exe string) Image {
	return Image{
		Name:   PauseImage,
		Files:  []File{{Path: "/pause", Mode: 0o755, Source: exe}},
		Config: ImageConfig{Entrypoint: []string{"/pause", "pause"}, User: "65535:65535", Env: []string{defaultPath}},
	}
}

// EtcdImage is the image of one etcd release with the official image's layout: etcd, etcdctl
// and etcdutl in /usr/local/bin, on a distroless base (no shell), /var/etcd and /var/lib/etcd,
// and etcd as the command. binDir holds the three binaries (hack/build-etcd.sh).
func EtcdImage(repository, version, binDir string) (Image, error) {
	files := distrolessStatic()
	for _, b := range []string{"etcd", "etcdctl", "etcdutl"} {
		src := filepath.Join(binDir, b)
		if _, err := os.Stat(src); err != nil {
			return Image{}, fmt.Errorf("the etcd %s image needs %s: %w", version, src, err)
		}
		files = append(files, File{Path: "/usr/local/bin/" + b, Mode: 0o755, Source: src})
	}
	files = append(files, File{Path: "/var/etcd", Dir: true, Mode: 0o700}, File{Path: "/var/lib/etcd", Dir: true, Mode: 0o700})
	return Image{
		Name:   repository + ":v" + strings.TrimPrefix(version, "v"),
		Files:  files,
		Config: ImageConfig{Env: []string{defaultPath}, Cmd: []string{"/usr/local/bin/etcd"}, WorkingDir: "/"},
	}, nil
}

// Dockerfile is what the final stage of the operator's Dockerfile says of its image.
type Dockerfile struct {
	// Base is the final stage's FROM.
	Base string
	// BinaryPath is where the final stage copies the operator's binary (COPY --from=build).
	BinaryPath string
	User       string
	Entrypoint []string
	Cmd        []string
}

var fromLine = regexp.MustCompile(`^FROM\s+(\S+)`)

// ParseDockerfile reads the final stage of the Dockerfile at path: its base, the one COPY of
// the built binary, USER, ENTRYPOINT and CMD (exec form).
func ParseDockerfile(path string) (Dockerfile, error) {
	f, err := os.Open(path)
	if err != nil {
		return Dockerfile{}, err
	}
	defer f.Close()
	var d Dockerfile
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if m := fromLine.FindStringSubmatch(line); m != nil {
			d = Dockerfile{Base: m[1]} // a new stage: only the last one makes the image
			continue
		}
		word, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(word) {
		case "COPY":
			fields := strings.Fields(rest)
			if len(fields) == 3 && strings.HasPrefix(fields[0], "--from=") {
				d.BinaryPath = fields[2]
			}
		case "USER":
			d.User = rest
		case "ENTRYPOINT", "CMD":
			var argv []string
			if err := json.Unmarshal([]byte(rest), &argv); err != nil {
				return Dockerfile{}, fmt.Errorf("%s: %s is not in exec form: %w", path, word, err)
			}
			if strings.ToUpper(word) == "CMD" {
				d.Cmd = argv
			} else {
				d.Entrypoint = argv
			}
		}
	}
	if err := sc.Err(); err != nil {
		return Dockerfile{}, err
	}
	if d.BinaryPath == "" || d.User == "" || len(d.Entrypoint) == 0 {
		return Dockerfile{}, fmt.Errorf("%s: the final stage has no COPY --from of the binary, USER or ENTRYPOINT", path)
	}
	return d, nil
}

// OperatorImageOf is the operator's image as the Dockerfile at dockerfile builds it, from the
// operator binary bin (built by make build with the Dockerfile's flags): the binary where the
// final stage copies it, its USER, ENTRYPOINT and CMD, on the distroless static equivalent.
func OperatorImageOf(dockerfile, bin string) (Image, error) {
	d, err := ParseDockerfile(dockerfile)
	if err != nil {
		return Image{}, err
	}
	files := append(distrolessStatic(), File{Path: d.BinaryPath, Mode: 0o755, Source: bin})
	return Image{
		Name:  OperatorImage,
		Files: files,
		Config: ImageConfig{
			User: d.User, Entrypoint: d.Entrypoint, Cmd: d.Cmd, Env: []string{defaultPath}, WorkingDir: "/",
		},
	}, nil
}

// EtcdVersions lists the etcd builds under etcdRoot (bin/etcd/v<version> folders with an etcd
// binary), without the v.
func EtcdVersions(etcdRoot string) []string {
	entries, _ := os.ReadDir(etcdRoot)
	var out []string
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "v") {
			continue
		}
		if _, err := os.Stat(filepath.Join(etcdRoot, e.Name(), "etcdutl")); err == nil {
			out = append(out, strings.TrimPrefix(e.Name(), "v"))
		}
	}
	sort.Strings(out)
	return out
}

// ChartEtcdRepository reads image.repository from the etcd-cluster chart's values.yaml at
// path: the repository the member pods use by default, so that the lane's etcd images carry
// the names the chart renders.
func ChartEtcdRepository(valuesPath string) (string, error) {
	data, err := os.ReadFile(valuesPath)
	if err != nil {
		return "", err
	}
	inImage := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "image:") {
			inImage = true
			continue
		}
		if inImage {
			if line != "" && !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "#") {
				break
			}
			if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == "repository" {
				return strings.Trim(strings.TrimSpace(v), `"'`), nil
			}
		}
	}
	return "", fmt.Errorf("%s: no image.repository", valuesPath)
}
