// Package packaging checks the operator's image without a container engine: the Dockerfile
// builds the binary `make build` builds (the same go build flags, so they cannot drift), that
// binary is static (it runs on a distroless base with no C library), and the image runs as
// the non-root user and command the Deployment of config/manager names.
package packaging

import (
	"bufio"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/etcd-pilot/etcd-pilot/internal/testutil"
)

// version is a stand-in VERSION: both builds must put it where the other does.
const version = "v0.0.0-packaging-test"

func repoRoot(t *testing.T) string { return testutil.RepoRoot(t) }

// dockerfile is what the tests read from the Dockerfile.
type dockerfile struct {
	goImage    string   // the build stage's base, golang:X
	build      []string // the RUN line that runs go build, as words, ${VERSION} replaced by version
	copyTarget string   // where the binary goes in the final image
	user       string
	entrypoint []string
	cmd        []string
}

// parseDockerfile reads the instructions this package checks, joining continued lines.
func parseDockerfile(t *testing.T, root string) dockerfile {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	var cur strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "#") || (l == "" && cur.Len() == 0) {
			continue
		}
		if s, ok := strings.CutSuffix(l, `\`); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(l)
		lines = append(lines, cur.String())
		cur.Reset()
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	var d dockerfile
	for _, l := range lines {
		instr, rest, _ := strings.Cut(l, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(instr) {
		case "FROM":
			if f := strings.Fields(rest); len(f) == 3 && strings.EqualFold(f[1], "AS") && f[2] == "build" {
				d.goImage = f[0]
			}
		case "RUN":
			if strings.Contains(rest, "go build") {
				rest = strings.NewReplacer("${VERSION}", version, "$VERSION", version).Replace(rest)
				d.build = shellWords(t, rest)
			}
		case "COPY":
			if f := strings.Fields(rest); len(f) == 3 && f[0] == "--from=build" {
				d.copyTarget = f[2]
			}
		case "USER":
			d.user = rest
		case "ENTRYPOINT":
			d.entrypoint = jsonArray(t, rest)
		case "CMD":
			d.cmd = jsonArray(t, rest)
		}
	}
	if d.build == nil || d.goImage == "" || d.copyTarget == "" || d.user == "" || d.entrypoint == nil {
		t.Fatalf("the Dockerfile lacks a build stage, a go build, the binary's COPY, USER or ENTRYPOINT: %+v", d)
	}
	return d
}

func jsonArray(t *testing.T, s string) []string {
	t.Helper()
	var out []string
	if err := yaml.Unmarshal([]byte(s), &out); err != nil {
		t.Fatalf("%s is not an exec-form array: %v", s, err)
	}
	return out
}

// shellWords splits a simple shell command line into words: blanks separate them, single and
// double quotes group them. No expansion: the tests substitute VERSION themselves.
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	var words []string
	var w strings.Builder
	inWord := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case strings.ContainsRune("&|;<>$`", r):
			t.Fatalf("%q is more than a simple command (%q): teach the test to read it", s, r)
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		t.Fatalf("unclosed quote in %q", s)
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}

// makeBuild is the command `make build` runs for bin/etcd-pilot, as words.
func makeBuild(t *testing.T, root string) []string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "make", "-s", "-n", "-C", root, "build", "VERSION="+version).Output()
	if err != nil {
		t.Fatalf("make -n build: %v", err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "go build") && strings.Contains(l, " -o bin/etcd-pilot ") {
			return shellWords(t, l)
		}
	}
	t.Fatalf("make -n build prints no build of bin/etcd-pilot:\n%s", out)
	return nil
}

// withoutOutput drops "-o PATH" from a go build command and returns PATH.
func withoutOutput(t *testing.T, words []string) ([]string, string) {
	t.Helper()
	i := slices.Index(words, "-o")
	if i < 0 || i+1 == len(words) {
		t.Fatalf("no -o in %q", words)
	}
	return slices.Delete(slices.Clone(words), i, i+2), words[i+1]
}

// envAndArgs splits leading NAME=VALUE words from a command.
func envAndArgs(words []string) (env, args []string) {
	for i, w := range words {
		if name, _, ok := strings.Cut(w, "="); !ok || name == "" || strings.ContainsAny(name, "-/.") {
			return words[:i], words[i:]
		}
	}
	return words, nil
}

func TestDockerfileBuildsLikeTheMakefile(t *testing.T) {
	root := repoRoot(t)
	docker, _ := withoutOutput(t, parseDockerfile(t, root).build)
	mk, _ := withoutOutput(t, makeBuild(t, root))
	if !slices.Equal(docker, mk) {
		t.Errorf("the Dockerfile builds the operator with\n  %q\n`make build` with\n  %q\nkeep them the same (the Makefile's OPERATOR_LDFLAGS)", docker, mk)
	}
	if env, _ := envAndArgs(docker); !slices.Contains(env, "CGO_ENABLED=0") {
		t.Errorf("the Dockerfile's go build runs with %q, not CGO_ENABLED=0", env)
	}
}

// The build stage's Go is go.mod's language version.
func TestDockerfileGoIsGoMods(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var goVersion string
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "go "); ok {
			goVersion = strings.TrimSpace(v)
		}
	}
	parts := strings.Split(goVersion, ".")
	if len(parts) < 2 {
		t.Fatalf("go.mod's go directive %q", goVersion)
	}
	want := "golang:" + parts[0] + "." + parts[1]
	if img := parseDockerfile(t, root).goImage; img != want && !strings.HasPrefix(img, want+".") && !strings.HasPrefix(img, want+"-") {
		t.Errorf("the Dockerfile builds with %s, go.mod asks for Go %s", img, goVersion)
	}
}

// The image runs as the user, and the command, that config/manager's Deployment names: the
// pod's runAsUser and runAsGroup are the image's USER, and the Deployment's command is the
// image's binary (the local cluster runs the operator's image with the same command).
func TestImageRunsAsTheDeploymentSays(t *testing.T) {
	root := repoRoot(t)
	df := parseDockerfile(t, root)
	b, err := os.ReadFile(filepath.Join(root, "config", "manager", "manager.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var d *appsv1.Deployment
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var o appsv1.Deployment
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatal(err)
		}
		if o.Kind == "Deployment" {
			d = &o
		}
	}
	if d == nil {
		t.Fatal("no Deployment in config/manager/manager.yaml")
	}
	uid, gid, _ := strings.Cut(df.user, ":")
	sc := d.Spec.Template.Spec.SecurityContext
	switch {
	case sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
		t.Error("the Deployment's pods do not require a non-root user")
	case sc.RunAsUser == nil || strconv.FormatInt(*sc.RunAsUser, 10) != uid:
		t.Errorf("the Dockerfile's USER is %s, the pods' runAsUser %v", df.user, sc.RunAsUser)
	case sc.RunAsGroup == nil || strconv.FormatInt(*sc.RunAsGroup, 10) != gid:
		t.Errorf("the Dockerfile's USER is %s, the pods' runAsGroup %v", df.user, sc.RunAsGroup)
	}
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("the image's user %q is not a numeric non-root uid (runAsNonRoot needs one to check)", uid)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if !slices.Equal(c.Command, df.entrypoint) || df.copyTarget != df.entrypoint[0] {
		t.Errorf("the Deployment runs %q; the image's ENTRYPOINT is %q and its binary %s", c.Command, df.entrypoint, df.copyTarget)
	}
	if len(df.cmd) == 0 || len(c.Args) == 0 || df.cmd[0] != c.Args[0] {
		t.Errorf("the image's CMD %q and the Deployment's args %q run different subcommands", df.cmd, c.Args)
	}
}

// The Dockerfile's build, run here, gives a static executable: no program interpreter, no
// dynamic section, no shared libraries. It runs and reports the version it was given.
func TestImageBinaryIsStatic(t *testing.T) {
	root := repoRoot(t)
	words := slices.Clone(parseDockerfile(t, root).build)
	bin := filepath.Join(t.TempDir(), "etcd-pilot")
	i := slices.Index(words, "-o")
	if i < 0 || i+1 == len(words) {
		t.Fatalf("no -o in the Dockerfile's build %q", words)
	}
	words[i+1] = bin
	env, args := envAndArgs(words)
	if len(args) < 2 || args[0] != "go" || args[1] != "build" {
		t.Fatalf("the Dockerfile's build is not go build: %q", words)
	}
	cmd := exec.CommandContext(t.Context(), "go", args[1:]...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %q: %v\n%s", strings.Join(env, " "), args, err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the operator's binary has a %s program header: it is not static", p.Type)
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("the operator's binary needs shared libraries %v (%v)", libs, err)
	}
	out, err := exec.CommandContext(t.Context(), bin, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), version) {
		t.Errorf("%s version: %v\n%s\n(want the version the build was given, %s)", bin, err, out, version)
	}
	t.Logf("%s", out)
}
